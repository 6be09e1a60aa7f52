"""The operator's command line, shared by `gdpval operator` and `python -m gdpval.controller`.

It lives with the controller so that the operator's entry point never imports the whole CLI.
"""

from __future__ import annotations

import logging
from typing import Annotated, Optional

import typer


def operator_command(
    namespace: Annotated[Optional[list[str]], typer.Option("--namespace", "-n", help="Namespace to watch (repeatable; none = all).")] = None,
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics and /healthz (0 = off).")] = 8080,
    agent_image: Annotated[Optional[str], typer.Option(envvar="GDPVAL_AGENT_IMAGE", help="Default agent image.")] = None,
    sandbox_image: Annotated[Optional[str], typer.Option(envvar="GDPVAL_SANDBOX_IMAGE", help="Default sandbox image.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    leader_elect: Annotated[bool, typer.Option(help="Act only while holding a coordination.k8s.io Lease (for more than one replica).")] = False,
    lease_name: Annotated[str, typer.Option(help="Name of the leader-election Lease.")] = "gdpval-operator",
    lease_namespace: Annotated[Optional[str], typer.Option(help="Namespace of the Lease; default $POD_NAMESPACE.")] = None,
) -> None:
    """Run the GdpvalRun operator (kopf) against the current kubeconfig or in-cluster account."""
    from gdpval.controller.effects.operator import LeaderElection, run_operator

    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(force=True, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled event is noise
    election = LeaderElection.of(lease_namespace, lease_name) if leader_elect else None
    run_operator(namespace or [], metrics_port or None, agent_image, sandbox_image, election)
