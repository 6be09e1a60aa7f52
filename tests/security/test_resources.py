"""Resource attacks through `gdpval run`, as root and as uid 65534, with small limits so they stay quick:
a fork bomb, memory, /tmp, the workspace disk and sparse deliverables. Each is contained where the run
said at start that the limit holds; where it said "not enforced", that line and --strict-limits are checked."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gdpval.sandbox import limits
from gdpval.sandbox.limits import disk
from support.attacks import NOBODY

USERS = pytest.mark.parametrize("uid", [0, NOBODY], ids=["root", "nonroot"])
SMALL = ("--sandbox-pids", "64", "--sandbox-memory-mb", "256", "--sandbox-disk-mb", "128")

FORKS = """import os, signal, time
children = []
try:
    while len(children) < 500:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    print('refused', exc.strerror)
print('forked', len(children))
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""
ESCAPING_BOMB = "setsid sh -c 'while :; do sleep 1000.{tag} & done' >/dev/null 2>&1 & sleep 1; echo started"
MEMORY = """blocks = []
try:
    for i in range(48):
        blocks.append(bytearray(64 * 1024 * 1024))
        print('held', (i + 1) * 64, 'MiB', flush=True)
except MemoryError:
    print('MemoryError')
"""
TMP_FILL = "dd if=/dev/zero of=/tmp/fill bs=1M count=400 2>&1 | tail -1; echo dd=$?; df -m /tmp | tail -1"
DELIVERABLE = "mkdir -p deliverable_files && echo made before > deliverable_files/report.txt && echo written"
ONE_BIG_FILE = "dd if=/dev/zero of=/workspace/big bs=1M count=200 2>/dev/null; echo size=$(stat -c %s /workspace/big); rm /workspace/big"
MANY_FILES = "for i in 1 2 3; do dd if=/dev/zero of=/workspace/f$i bs=1M count=60 2>&1 | grep -v records; done; du -sm /workspace"
ALIVE = {"bash": "echo alive"}
SPARSE = "cd deliverable_files && for i in 1 2 3 4 5 6; do truncate -s 40M sparse-$i.bin; done; ls | wc -l"


def live_host_pids(needle: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def enforced(run, name: str) -> bool:
    lines = [line for line in run.stderr.splitlines() if line.startswith(f"sandbox {name}: ")]
    assert len(lines) == 1, run.stderr
    return "not enforced" not in lines[0]


@USERS
def test_fork_bomb_is_capped_and_killed_when_the_sample_ends(run_script, uid: int) -> None:
    tag = secrets.token_hex(3)
    run = run_script([{"python_exec": FORKS}, {"bash": ESCAPING_BOMB.format(tag=tag)}], uid, *SMALL)
    assert run.returncode == 0, run.stderr
    assert enforced(run, "processes")
    forks, bomb = run.tool_results()
    count = int(forks.split("forked ")[1].split()[0])
    assert "refused Resource temporarily unavailable" in forks and 20 < count < 64, forks
    assert "started" in bomb
    deadline = time.monotonic() + 5
    while live_host_pids(f"1000.{tag}".encode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_host_pids(f"1000.{tag}".encode()) == []


@USERS
def test_memory_is_capped_or_reported(run_script, uid: int) -> None:
    run = run_script([{"python_exec": MEMORY}], uid, *SMALL)
    (out,) = run.tool_results()
    held = [int(line.split()[1]) for line in out.splitlines() if line.startswith("held ")]
    assert max(held, default=0) <= 256 and ("MemoryError" in out or "killed by signal 9 (SIGKILL: out of memory?)" in out), out
    if not enforced(run, "memory"):  # each process is capped, the sandbox's total is not
        assert "256 MiB per process (RLIMIT_DATA)" in run.stderr, run.stderr
        refused = run_script([{"bash": "true"}], uid, *SMALL, "--strict-limits")
        assert refused.returncode == 2 and "strictLimits" in refused.stderr and "memory" in refused.stderr, refused.stderr


@USERS
def test_tmp_is_a_tmpfs_within_the_memory_cap(run_script, uid: int) -> None:
    """Half the memory, or a quarter where the workspace is a tmpfs too (a non-root runner's) and takes the rest."""
    run = run_script([{"bash": TMP_FILL}], uid, *SMALL)
    (out,) = run.tool_results()
    size, used = (int(n) for n in out.split("tmpfs", 1)[1].split()[:2])
    assert size == (64 if "size-capped tmpfs" in run.stderr else 128) and used <= size and "400+0 records out" not in out, out
    assert f"sandbox tmpfs: /tmp {size} MiB" in run.stderr, run.stderr


@USERS
def test_writing_past_the_workspace_cap_is_enospc_and_the_sample_goes_on(run_script, uid: int) -> None:
    """Files each within the per-file cap but past the total: ENOSPC, told to the model; what was written
    before is collected. As root the workspace is a loop disk of the cap, as non-root a tmpfs within the memory."""
    run = run_script([{"bash": DELIVERABLE}, {"bash": ONE_BIG_FILE}, {"bash": MANY_FILES}, ALIVE], uid, *SMALL)
    assert run.returncode == 0, run.stderr
    assert enforced(run, "disk")
    _, one, many, alive = run.tool_results()
    assert int(one.split("size=")[1].split()[0]) <= 128 * 1024 * 1024, one
    assert "No space left on device" in many and int(many.split("\t/workspace")[0].split()[-1]) <= 128, many
    assert alive.startswith("alive"), alive
    (result_path,) = run.output.glob("runs/t/samples/*/attempt-1/result.json")
    assert json.loads(result_path.read_text())["deliverable_files"] == ["report.txt"]
    (kept,) = run.output.glob("runs/t/samples/*/attempt-1/deliverable_files/report.txt")
    assert kept.read_text() == "made before\n"


@USERS
def test_sparse_deliverables_count_whole_against_the_total_cap(run_script, uid: int) -> None:
    run = run_script([{"bash": SPARSE}], uid, "--max-deliverable-total-mb", "100")
    assert run.returncode == 0, run.stderr
    (result_path,) = run.output.glob("runs/t/samples/*/attempt-1/result.json")
    result = json.loads(result_path.read_text())
    assert sorted(result["deliverable_files"]) == ["sparse-1.bin", "sparse-2.bin"]
    assert sorted(r["path"] for r in result["refused_files"]) == [f"sparse-{i}.bin" for i in range(3, 7)]
    written = sum(p.stat().st_size for p in run.output.rglob("*") if p.is_file())
    assert written < 2 * 100 * 1024 * 1024  # the attempt's copy and the submission's


def test_a_killed_runners_workspace_disk_is_swept(tmp_path: Path) -> None:
    """A runner killed before it unmounted leaves its loop mount; the next runner's first disk removes it."""
    assert disk.loop_disk_support() == "", "this suite runs as root, where the workspace disk is a loop mount"
    runtime = Path(tempfile.mkdtemp(prefix=limits.RUNTIME_PREFIX))
    mountpoint = tmp_path / "wörk\tspace\u2028\\040 \udcff"  # mountinfo escapes the tab, space and backslash; the rest is raw bytes
    mountpoint.mkdir()
    disk.LoopDisk(runtime / limits.IMAGE_FILE, mountpoint, 64 * 1024 * 1024)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (runtime / limits.OWNER_FILE).write_text(str(dead.pid))
    assert os.path.ismount(mountpoint)
    disk.sweep_orphan_disks.cache_clear()
    disk.sweep_orphan_disks()
    assert not os.path.ismount(mountpoint) and not runtime.exists()


def test_a_killed_runners_file_system_template_is_swept() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=disk.TEMPLATE_PREFIX))
    (stale / limits.OWNER_FILE).write_text(str(dead.pid))
    disk._template.cache_clear()
    fresh = disk._template(64 * 1024 * 1024)
    assert not stale.exists() and (fresh.parent / limits.OWNER_FILE).read_text() == str(os.getpid())


CPU_SPIN = "import time\nt, c = time.time(), time.process_time()\nwhile time.time() - t < 2:\n    pass\nprint('cpu', round(time.process_time() - c, 2))"


@USERS
def test_cpu_quota_holds_or_is_reported(run_script, uid: int) -> None:
    run = run_script([{"python_exec": CPU_SPIN}], uid, "--sandbox-cpus", "0.5")
    (out,) = run.tool_results()
    used = float(out.split("cpu ")[1].split()[0])
    if enforced(run, "cpu"):
        assert used <= 1.3, out  # half a core over 2 s, with the quota's 100 ms granularity
    else:
        assert "not enforced" in run.stderr, run.stderr
