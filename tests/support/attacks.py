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
