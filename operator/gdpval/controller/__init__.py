"""The Kubernetes operator for GdpvalRun: prepare Job -> one Pod per sample -> S3 -> submission Job.

Two halves, and the types between them:
- `types`: what a pass observed (`Observed`), what it plans (`Plan`, concluded by a `Verdict`), and
  the small records every part shares (`Probe`, `Blocker`, `Submission`, `Note`, `Tally`);
- `pure/`, no I/O, unit tested, over the GdpvalRun models of `gdpval.api`: `names`, `manifests` (every object the operator creates), `ledger` (per-sample
  state), `observe` (views of pods and Jobs), `policy` (retry, budget, cleanup and timing rules),
  `workload` (what the run reads of Kueue), `queue` (Kueue's decisions), `judging`, `status` (the status a pass yields), and `decide/`, the decision, split
  by phase: `samples`, `lifecycle`, `suspend` (and queueing);
- `effects/`, everything that talks to the outside: the adapters `kube` (Kubernetes API), `s3`,
  `metrics`, `leader` (the Lease), `fanout`, `resolve`, `memory`; then `gather` (what a pass reads),
  `apply` (what it writes), `worker` (the Controller: one worker per run, its passes), `operator`
  (kopf wiring, the process) and `entry` (its command line). Adapters never reach the decision
  (tests/unit/test_layers.py).

Per-sample state lives in pods (attempts in flight), S3 result.json (commit markers) and a ledger
ConfigMap owned by the run; see `pure.decide` for why this is crash-safe.

Entry point for the CLI: `run_operator(namespaces, metrics_port, agent_image, sandbox_image)`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_operator"]


def __getattr__(name: str) -> Any:
    """Import lazily: the CLI's other commands should not pay for kopf and the kubernetes client."""
    if name == "run_operator":
        from gdpval.controller.effects.operator import run_operator

        return run_operator
    raise AttributeError(name)
