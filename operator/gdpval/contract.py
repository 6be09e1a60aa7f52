"""The pod contract: what the operator's manifests and the code running inside pods agree on.

Ports, paths, environment names and the sandbox token live here once; the manifest builders
(`controller.manifests`), the in-pod steps (`runner.pod`) and local sandboxes import them. The
tool server is a standalone standard-library script copied into images, so it repeats the token's
name and the health path; a unit test keeps them equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

UID = 1000  # the non-root user of every container

SANDBOX_HOST = "127.0.0.1"
SANDBOX_PORT = 7000
SANDBOX_URL = f"http://{SANDBOX_HOST}:{SANDBOX_PORT}"
HEALTH_PATH = "/healthz"
TOOLSERVER = "/opt/gdpval/toolserver.py"  # where images (and bubblewrap sandboxes) hold the tool server

WORKSPACE = "/workspace"  # the model's working folder; deliverables go in its deliverable_files/
REFERENCES = "/reference_files"  # read-only, laid out as <hash>/<name>
SCRATCH = "/tmp"  # HOME and temporary files of our own containers
CACHE_DIR = "/tmp/gdpval-cache"  # the prepare Job's dataset cache

TOKEN_ENV = "GDPVAL_SANDBOX_TOKEN"  # bearer token shared by the agent and its sandbox only
# In a pod the token lives in a Secret of the run (key TOKEN_KEY): the agent reads it as TOKEN_ENV,
# the sandbox as a file (the tool server's --token-file), so the pod spec never carries it.
TOKEN_KEY = "token"
TOKEN_DIR = "/run/gdpval-token"
TOKEN_FILE = f"{TOKEN_DIR}/{TOKEN_KEY}"
# A pod started ahead of its turn (spec.samples.startAhead) reads its go here: a downward-API file of an
# annotation the operator sets when the sample enters the window; empty until then.
GO_DIR = "/run/gdpval-go"
GO_FILE = f"{GO_DIR}/go"
GO_VALUE = "go"
# ...and, once it waits ready for its go (imports done, sandbox healthy, first request rehearsed), its agent
# creates READY_FILE in its own /tmp (no other container of the pod writes there): the agent's startup probe
# looks for it, so the pod turns Ready and the operator gives the go only to a pod that waits ready.
READY_FILE = f"{SCRATCH}/gdpval-ready"
# A pod of a GdpvalPool holds no run until a run claims it: its agent (imports done, sandbox healthy, READY_FILE made)
# waits for CLAIM_FILE, a downward-API file of the claim annotation (JSON: run, sample, storage, endpoints; no secret),
# beside the claim's Secret projected into the same folder (API_KEY_ENV and S3_KEY_ENVS; optional: absent until the claim) and
# the go file of a claim made ahead of its turn. The Secret's CLAIM_ID_KEY equals the claim's id once it is in place.
CLAIM_DIR = "/run/gdpval-claim"
CLAIM_FILE = f"{CLAIM_DIR}/claim"
CLAIM_GO_FILE = f"{CLAIM_DIR}/go"
CLAIM_ID_KEY = "claim-id"
S3_KEY_ENVS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
# The judge Job renders files in a sidecar of the run's sandbox image (LibreOffice) through its tool server:
# the judge copies each file and the worker into RENDER_DIR, shared with the sidecar; RENDER_URL_ENV names the
# sidecar's tool server, RENDER_IMAGE_ENV its image (for the renderer's label); the token is made in the pod.
RENDER_DIR = "/render"
RENDER_URL_ENV = "GDPVAL_RENDER_SANDBOX"
RENDER_IMAGE_ENV = "GDPVAL_RENDER_IMAGE"
RENDER_TOKEN_DIR = "/run/gdpval-render"
RENDER_TOKEN_FILE = f"{RENDER_TOKEN_DIR}/token"
SETTINGS_ENV = "GDPVAL_RUN_SETTINGS"  # the prepare Job's run settings, as JSON
API_KEY_ENV = "OPENAI_API_KEY"  # the model API key, in the agent container only

# The prepare Job's exit code when the run's storage holds another run's run.json or other pinned
# settings: its Job fails at once (podFailurePolicy) and the operator names the conflict in status.
EXIT_RUN_CONFLICT = 4
# `gdpval run`'s exit statuses (README, "Exit status"): 0 every selected sample has a committed success;
# SAMPLES_FAILED some failed or have no committed attempt; 2 bad input, nothing run (GdpvalError);
# UNFINISHED some attempts crashed and run again on resume; 130 interrupted by Ctrl-C.
EXIT_SAMPLES_FAILED = 1
EXIT_UNFINISHED = 3
# A sample pod whose attempt the model endpoint's outage ended (its breaker opened and the outage
# outlasted OUTAGE_HOLD_SECONDS, spec.samples.outageHoldSeconds, or ended the sample) exits with this, committing nothing: the
# operator holds the attempt (condition ModelUnavailable) and starts it again, same number, once
# the endpoint answers. EX_TEMPFAIL of sysexits.h.
EXIT_MODEL_UNAVAILABLE = 75
# `gdpval judge --require-consistency`: the judge's two orders disagreed too often for its estimate to stand.
EXIT_JUDGE_UNRELIABLE = 5
OUTAGE_HOLD_ENV = "GDPVAL_OUTAGE_HOLD_SECONDS"
OUTAGE_HOLD_SECONDS = 300.0


@dataclass(frozen=True)
class Claim:
    """A pool pod's claim as its agent reads it from CLAIM_FILE: the run and sample it now serves, where the run's
    storage is, the addresses of endpoints it may not look up (a network-off pod has no DNS). No secret."""

    id: str
    run: str
    output: str
    sample: str
    attempt: int
    ahead: bool = False  # claimed ahead of its turn: wait for the go file before the first model request
    endpoint: str = ""
    region: str = "us-east-1"
    outage_hold: int = 300
    hosts: dict[str, list[str]] = field(default_factory=dict)

    def wire(self) -> str:
        """ASCII JSON: an annotation value survives any sample id (U+2028, NUL, a lone surrogate) as escapes."""
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> Claim:
        """Raises ValueError (or KeyError, TypeError) on anything but a claim the operator wrote."""
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
