"""The tool server outlives whatever its commands do, through `gdpval run` as root and as uid 65534.

A command that fills /tmp or /dev/shm, exhausts memory, processes or descriptors fails as on a real
machine (ENOSPC, the OOM killer or a per-process limit, EAGAIN, EMFILE) and is told so; the next
call of the same sample is answered. A command cannot stop the server, read its memory or
descriptors (its token), or raise its OOM score."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.attacks import NOBODY

USERS = pytest.mark.parametrize("uid", [0, NOBODY], ids=["root", "nonroot"])
SMALL = ("--sandbox-pids", "64", "--sandbox-memory-mb", "256", "--sandbox-disk-mb", "512")  # files may outgrow /tmp
ALIVE = {"bash": "echo alive"}
REFUSED = "failed to start bash: [Errno 11] Resource temporarily unavailable"

FILL = "dd if=/dev/zero of={path}/fill bs=1M count=400 2>&1 | head -1; df -m {path} | tail -1"
GREEDY = """blocks = []
try:
    for i in range(64):
        blocks.append(bytearray(16 << 20))
        print('held', (i + 1) * 16, flush=True)
except MemoryError:
    print('MemoryError')
"""
BOMB = """import os, subprocess, sys
KEEP_FORKING = "import os, time\\nwhile True:\\n    try:\\n        os.fork() or time.sleep(1000)\\n    except OSError:\\n        time.sleep(0.01)"
subprocess.Popen([sys.executable, "-c", KEEP_FORKING], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(3000):
    try:
        pid = os.fork()
    except OSError as exc:
        print("full:", exc.strerror)
        break
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""
DESCRIPTORS = """import os
fds = []
try:
    while True:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as exc:
    print('refused after', len(fds), exc.strerror)
"""
SERVERS = "[int(p) for p in os.listdir('/proc') if p.isdigit() and b'toolserver' in open(f'/proc/{p}/cmdline', 'rb').read()]"
SIGNALS = f"""import os, signal
servers = {SERVERS}
print('servers', servers)
for pid in servers:
    for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError as exc:
            print('refused', sig.name, exc.strerror)
os.kill(-1, signal.SIGKILL)
"""
PROC_FILES = f"""import os
servers = {SERVERS}
print('servers', servers)
for pid in servers:
    for name, mode in (('mem', 'rb'), ('mem', 'r+b'), ('environ', 'rb'), ('fd/0', 'rb'), ('oom_score_adj', 'r+b')):
        try:
            open(f'/proc/{{pid}}/{{name}}', mode).close()
            print('OPENED', name, mode)
        except OSError as exc:
            print('refused', name, mode, exc.strerror)
    try:
        print('FDS', os.listdir(f'/proc/{{pid}}/fd'))
    except OSError as exc:
        print('refused fd', exc.strerror)
"""


def answered(run, steps: int) -> list[str]:
    """The tool results of a run that completed every step (the last one `echo alive`)."""
    assert run.returncode == 0, run.stderr
    results = run.tool_results()
    assert len(results) == steps and results[-1].startswith("alive"), results
    return results


@USERS
@pytest.mark.parametrize("path", ["/tmp", "/dev/shm"])
def test_filling_a_memory_file_system_is_enospc_and_the_sample_goes_on(run_script, uid: int, path: str) -> None:
    run = run_script([{"bash": FILL.format(path=path)}, ALIVE], uid, *SMALL)
    fill, _ = answered(run, 2)
    size = int(fill.split("tmpfs", 1)[1].split()[0])
    assert "No space left on device" in fill and size <= 128, fill


@USERS
def test_exhausting_memory_stops_the_command_not_the_server(run_script, uid: int) -> None:
    """With /tmp and /dev/shm full (memory no process owns), a greedy command is stopped within the
    cap, and the tool result says how."""
    steps = [{"bash": FILL.format(path="/tmp")}, {"bash": FILL.format(path="/dev/shm")}, {"python_exec": GREEDY}, ALIVE]
    greedy = answered(run_script(steps, uid, *SMALL), 4)[2]
    held = [int(line.split()[1]) for line in greedy.splitlines() if line.startswith("held ")]
    assert max(held, default=0) < 256, greedy
    assert "MemoryError" in greedy or "killed by signal 9 (SIGKILL: out of memory?)" in greedy, greedy


@USERS
def test_exhausting_processes_is_eagain_and_the_sample_goes_on(run_script, uid: int) -> None:
    """A bomb that keeps forking outlives its command and holds the sandbox's process slots. The slot
    its command frees on exit goes to whoever forks first, the bomb or the server starting the next
    command, so each later call either runs or is refused with EAGAIN; every one is answered."""
    run = run_script([{"python_exec": BOMB}, {"bash": "echo ran"}, ALIVE], uid, *SMALL)
    assert run.returncode == 0, run.stderr
    bomb, *later = run.tool_results()
    assert "full: Resource temporarily unavailable" in bomb, bomb
    assert len(later) == 2, later
    assert all(out.startswith(("ran", "alive", REFUSED)) for out in later), later


def test_a_command_with_no_process_slot_left_is_refused_with_eagain() -> None:
    """Deterministic half of the test above: with no slot left, starting a command fails at once and the
    result says why, with exit code 127 as a shell's "not started"."""
    probe = (
        "import json, resource\n"
        "from gdpval.sandbox.toolserver import ProcessRegistry, run_command\n"
        "resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))\n"
        "print(json.dumps(run_command(['bash', '-c', 'echo ran'], None, '/', 10, 1000, ProcessRegistry())))\n"
    )
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", probe]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["output"].startswith(REFUSED) and result["exit_code"] == 127, result


@USERS
def test_exhausting_descriptors_is_emfile_and_the_sample_goes_on(run_script, uid: int) -> None:
    out, _ = answered(run_script([{"python_exec": DESCRIPTORS}, ALIVE], uid), 2)
    assert "Too many open files" in out, out


@USERS
def test_a_command_cannot_stop_the_server(run_script, uid: int) -> None:
    out, _ = answered(run_script([{"python_exec": SIGNALS}, ALIVE], uid), 2)
    assert "servers [" in out and "servers []" not in out, out


@USERS
def test_a_command_cannot_open_the_servers_memory_or_descriptors(run_script, uid: int) -> None:
    out, _ = answered(run_script([{"python_exec": PROC_FILES}, ALIVE], uid), 2)
    assert "servers [" in out and "servers []" not in out, out
    assert "OPENED" not in out and "FDS" not in out, out
