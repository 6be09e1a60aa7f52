"""Names, labels and annotations of the objects the operator owns.

Kubernetes caps label values and DNS labels at 63 characters; a long run or sample name is cut and
suffixed with a hash of the full text, so two different inputs never collide after truncation.
"""

from __future__ import annotations

import hashlib
import re

from gdpval.api.v1alpha1 import GROUP

MAX = 63
MANAGED_BY = "gdpval-operator"

# Labels: what selectors and indexes use.
L_NAME = "app.kubernetes.io/name"
L_MANAGED_BY = "app.kubernetes.io/managed-by"
L_COMPONENT = "app.kubernetes.io/component"
L_INSTANCE = "app.kubernetes.io/instance"
L_RUN = f"{GROUP}/run"
L_RUN_UID = f"{GROUP}/run-uid"
L_SAMPLE = f"{GROUP}/sample"
L_ATTEMPT = f"{GROUP}/attempt"
L_NETWORK = f"{GROUP}/network"
L_POOL = f"{GROUP}/pool"  # a pooled pod's pool, kept once claimed (the pool counts its claimed pods)
L_SHAPE = f"{GROUP}/pool-shape"  # the hash of a pooled pod's shape: a run claims only pods of its own shape
L_CLAIMED = f"{GROUP}/claimed"  # "" while in the pool (held by a run or not); the claiming run's uid from its claim

# Annotations: full values that may not fit a label.
A_SAMPLE_ID = f"{GROUP}/sample-id"
A_GO = f"{GROUP}/go"  # a pod started ahead: "" while it waits for its turn, contract.GO_VALUE once given
A_CLAIM = f"{GROUP}/claim"  # a pooled pod: "" in the pool, the claim (JSON, no secret) once claimed

# kopf's own storage, under our group.
FINALIZER = f"{GROUP}/finalizer"

COMPONENT_SAMPLE = "sample"
COMPONENT_PREPARE = "prepare"
COMPONENT_ASSEMBLE = "assemble"
COMPONENT_JUDGE = "judge"
COMPONENT_POOLED = "pooled"  # a pooled pod before its claim; a claimed one is a run's "sample"

MANAGED_SELECTOR = f"{L_MANAGED_BY}={MANAGED_BY}"

_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_OK = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def label_value(text: str) -> str:
    """`text` itself when it is a valid label value, else a readable prefix plus a hash."""
    if len(text) <= MAX and _LABEL_OK.match(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[: MAX - 9].rstrip("-_.")
    return f"{cleaned}-{_digest(text)}" if cleaned else _digest(text)


def dns_label(*parts: str) -> str:
    """A DNS-1123 label (pod, Job, ConfigMap name) from parts, unique per input."""
    joined = "-".join(parts)
    cleaned = _INVALID.sub("-", joined.lower()).strip("-")
    if cleaned == joined and len(cleaned) <= MAX:
        return cleaned
    return f"{cleaned[: MAX - 9].rstrip('-')}-{_digest(joined)}"


def sample_pod_name(run: str, sample: str, attempt: int) -> str:
    """Deterministic per attempt, so a repeated create after a crash finds the same pod (409)."""
    suffix = f"a{attempt}"
    full = f"{run}-{sample}-{suffix}"
    if len(full) <= MAX and _INVALID.sub("-", full) == full:
        return full
    head = f"{run[:20]}-{sample[:24]}".lower()
    head = _INVALID.sub("-", head).strip("-")
    return f"{head}-{_digest(run + '/' + sample)}-{suffix}"


def job_name(run: str, component: str) -> str:
    return dns_label(run, component)


def ledger_name(run: str) -> str:
    return dns_label(run, "ledger")


def network_policy_name(run: str, network: bool = False) -> str:
    return dns_label(run, "network" if network else "no-network")


def token_secret_name(run: str) -> str:
    return dns_label(run, "sandbox-token")


def base_labels(run: str, uid: str, component: str) -> dict[str, str]:
    return {
        L_NAME: "gdpval",
        L_MANAGED_BY: MANAGED_BY,
        L_COMPONENT: component,
        L_INSTANCE: label_value(run),
        L_RUN: label_value(run),
        L_RUN_UID: uid,
    }


def pool_token_secret_name(pool: str) -> str:
    """Its own suffix: a pool and a run of one name never share a Secret."""
    return dns_label(pool, "pool-token")


def pool_pod_prefix(pool: str) -> str:
    """The start of a pool's pod names; the pool adds eight random characters."""
    return f"{dns_label(pool, 'pool')[: MAX - 9].rstrip('-')}-"


def claim_secret_name(pod: str) -> str:
    """The claimed pod's credentials, owned by the pod."""
    return f"{pod}-claim"


def attempt_selector(run_uid: str, sample: str, attempt: int) -> str:
    """The label selector of one attempt's pod, whatever its name (its own, or its pool's)."""
    return f"{L_RUN_UID}={run_uid},{L_SAMPLE}={label_value(sample)},{L_ATTEMPT}={attempt}"
