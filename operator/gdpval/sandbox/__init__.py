"""Sandboxes where the model's tools run: the tool server, its client, local sandboxes.

The names below load on first use: the CLI registers `gdpval runtime` from this package, and a sample
pod's `stage` needs none of them (issue 11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gdpval.lazy import loader

if TYPE_CHECKING:
    from gdpval.sandbox.client import (
        SandboxClient as SandboxClient,
    )
    from gdpval.sandbox.client import (
        SandboxError as SandboxError,
    )
    from gdpval.sandbox.client import (
        SandboxUnavailable as SandboxUnavailable,
    )
    from gdpval.sandbox.client import (
        ToolOutput as ToolOutput,
    )
    from gdpval.sandbox.launch import bwrap_status as bwrap_status
    from gdpval.sandbox.local import LocalSandbox as LocalSandbox

_HOMES = {
    "LocalSandbox": "gdpval.sandbox.local",
    "SandboxClient": "gdpval.sandbox.client",
    "SandboxError": "gdpval.sandbox.client",
    "SandboxUnavailable": "gdpval.sandbox.client",
    "ToolOutput": "gdpval.sandbox.client",
    "bwrap_status": "gdpval.sandbox.launch",
}
__all__ = list(_HOMES)

__getattr__ = loader(__name__, _HOMES)
