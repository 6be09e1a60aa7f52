"""What one conversion may take; its own module so the operator's pure manifest builders size the judge's render
sidecar from the same numbers the renderer enforces, without importing the renderer."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class RenderLimits:
    """What one conversion may take: memory (address space for the host child; the cgroup, /tmp included,
    in a sandbox), CPU seconds, wall seconds, processes, and the bytes it may write."""

    memory_bytes: int = 2048 * MIB
    cpu_seconds: int = 120
    wall_seconds: float = 150.0
    pids: int = 256
    disk_bytes: int = 512 * MIB
