"""Sandboxes where the model's tools run: the tool server, its client, local sandboxes, deliverables."""

from gdpval.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable, ToolOutput
from gdpval.sandbox.deliverables import Collected, Deliverable, collect, upload
from gdpval.sandbox.local import LocalSandbox, bwrap_status

__all__ = [
    "Collected",
    "Deliverable",
    "LocalSandbox",
    "SandboxClient",
    "SandboxError",
    "SandboxUnavailable",
    "ToolOutput",
    "bwrap_status",
    "collect",
    "upload",
]
