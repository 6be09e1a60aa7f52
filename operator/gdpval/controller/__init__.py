"""The Kubernetes operator for GdpvalRun: prepare Job -> one Pod per sample -> S3 -> submission Job.

Modules, from pure to effectful:
- `api`: the GdpvalRun spec/status models (the CRD is generated from them by `crd`);
- `names`, `manifests`: names, labels and every object the operator creates;
- `ledger`, `observe`, `reconcile`, `policy`, `status`: per-sample state, views of pods/Jobs, the
  reconcile decision, its retry/budget/cleanup rules and the status it yields (no I/O, unit tested);
- `kube`, `s3io`: blocking Kubernetes and S3 calls;
- `gather` (what a pass reads), `effects` (what it writes), `memory` (what a worker keeps between
  passes), `worker` (the Controller: one worker per run, its passes); `operator`: kopf wiring and
  the process entry point; `metrics`.

Per-sample state lives in pods (attempts in flight), S3 result.json (commit markers) and a ledger
ConfigMap owned by the run; see `reconcile` for why this is crash-safe.

Entry points for the CLI: `run_operator(namespaces, metrics_port, agent_image, sandbox_image)` and
`crd.render_crd()` / `crd.main(argv)`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["render_crd", "run_operator"]


def __getattr__(name: str) -> Any:
    """Import lazily: `gdpval crd` should not pay for kopf and the kubernetes client."""
    if name == "run_operator":
        from gdpval.controller.operator import run_operator

        return run_operator
    if name == "render_crd":
        from gdpval.controller.crd import render_crd

        return render_crd
    raise AttributeError(name)
