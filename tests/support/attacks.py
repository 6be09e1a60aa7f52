"""What the attack suite (tests/security) shares: canary credentials, the task it runs, and what a run left."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
CANARIES = {
    "OPENAI_API_KEY": "sk-canary-7f3e9d1c0b5a4e2f8d6c",
    "AWS_ACCESS_KEY_ID": "AKIACANARY7F3E9D1C0B",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-secret-5a4e2f8d6c7f3e9d1c0b",
}
REFERENCE = "reference_files/b4b6f98cfda65510720c346302e148f4/Population (4).xlsx"


@dataclass
class Run:
    """What one scripted run left: the CLI's exit and output, and every file of the output folder."""

    returncode: int
    stdout: str
    stderr: str
    output: Path

    def tool_results(self) -> list[str]:
        """The tool results the model read back, in order, from the transcript."""
        (transcript,) = self.output.glob("runs/t/samples/*/attempt-1/transcript.jsonl")
        events = [json.loads(line) for line in transcript.read_text().splitlines()]
        return [str(event["content"]) for event in events if event["event"] == "tool_result"]

    def all_bytes(self) -> bytes:
        """The CLI's output and every file written: transcripts, results, submission."""
        blobs = [self.stdout.encode(), self.stderr.encode()]
        blobs += [p.read_bytes() for p in sorted(self.output.rglob("*")) if p.is_file()]
        return b"\n".join(blobs)


def server_attack(host: str, port: int) -> str:
    """Python run as the tool server's uid beside it, as PID 1 of their pid namespace (a sample pod's sandbox
    container): open its memory, signal it, then try to listen on its address. Prints what it saw as JSON."""
    return f"""
import json, os, signal, socket, time
seen = {{}}
try:
    open("/proc/1/mem", "rb").close()
    seen["mem"] = "opened"
except OSError as exc:
    seen["mem"] = exc.strerror
for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):
    os.kill(1, sig)
time.sleep(2)
seen["server"] = open("/proc/1/cmdline", "rb").read().split(b"\\0")[1].decode()
for addr in ("{host}", "0.0.0.0"):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((addr, {port}))
        sock.listen()
        seen[addr] = "bound"
    except OSError as exc:
        seen[addr] = exc.strerror
print(json.dumps(seen))
"""


READ_ROOT_ONLY = """id -u; cat /etc/shadow; echo shadow=$?; cat /etc/gshadow; echo gshadow=$?
cat /reference_files/*/* > /dev/null; echo reference=$?
echo written > deliverable_files/answer.txt; echo answer=$?"""


def root_only_lines() -> list[bytes]:
    """Lines of the host's root-only files that must reach nothing the run wrote."""
    return [line for name in ("/etc/shadow", "/etc/gshadow") for line in Path(name).read_bytes().splitlines() if line.strip()]


def assert_root_only_files_refused(run) -> None:
    assert run.returncode == 0, run.stderr
    (out,) = run.tool_results()
    assert out.startswith("1000\n") and "shadow=1" in out and "gshadow=1" in out, out
    assert "reference=0" in out and "answer=0" in out, out
    (result_path,) = run.output.glob("runs/t/samples/*/attempt-1/result.json")
    result = json.loads(result_path.read_text())
    assert result["status"] == "succeeded" and result["deliverable_files"] == ["answer.txt"], result
    everything = run.all_bytes()
    assert not [line for line in root_only_lines() if line in everything]
