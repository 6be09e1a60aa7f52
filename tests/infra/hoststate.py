"""What the local cluster can leave on the host: processes, mounts, interfaces, iptables rules,
sysctls, cgroups and paths. Used to check that `hack/cluster.sh down` restores the machine."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Baseline:
    """The host as `up` recorded it before changing anything (hack/cluster.sh record_host_state)."""

    sysctls: dict[str, str]
    paths: set[str]
    chains: dict[str, set[str]]  # iptables / ip6tables -> chain names

    @classmethod
    def read(cls, state: Path) -> Baseline:
        sysctls = dict(line.split("=", 1) for line in (state / "sysctl.orig").read_text().splitlines() if line)
        paths = set((state / "paths.orig").read_text().split())
        chains = {t: set((state / f"{t}-chains.orig").read_text().split()) for t in ("iptables", "ip6tables")}
        return cls(sysctls, paths, chains)


def own_processes(binary_dirs: list[str]) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if any(exe.startswith(d.rstrip("/") + "/") for d in binary_dirs):
            found.append(f"{pid} {exe}")
    return found


def mounts(workdir: str) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4]
        if (
            target == workdir
            or target.startswith(workdir + "/")
            or "/netns/cni-" in target
            or target.startswith("/run/containerd")
            or target.startswith("/var/lib/kubelet")
        ):
            found.append(target)
    return found


def interfaces(names: list[str], bridge: str) -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name in names or f" master {bridge} " in line:
            found.append(name)
    return found


def iptables_leftovers(baseline: Baseline, tag: str) -> list[str]:
    found = []
    for tool in ("iptables", "ip6tables"):
        proc = subprocess.run([f"{tool}-save"], capture_output=True, text=True)
        if proc.returncode != 0:
            continue
        for line in proc.stdout.splitlines():
            if f"--comment {tag}" in line or f'--comment "{tag}"' in line:
                found.append(f"{tool}: {line}")
            match = re.match(r"^:((?:KUBE|CNI)-\S+)", line)
            if match and match.group(1) not in baseline.chains[tool]:
                found.append(f"{tool}: chain {match.group(1)}")
    return found


def sysctl_changes(baseline: Baseline) -> list[str]:
    changed = []
    for key, value in baseline.sysctls.items():
        now = Path("/proc/sys", key.replace(".", "/")).read_text().strip()
        if now.split() != value.split():
            changed.append(f"{key}: {value} -> {now}")
    return changed


def pod_cgroups() -> list[str]:
    return [str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")]


def new_paths(baseline: Baseline, host_paths: list[str]) -> list[str]:
    return [p for p in host_paths if p not in baseline.paths and os.path.lexists(p)]
