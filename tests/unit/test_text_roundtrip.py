"""Arbitrary text survives everything the project writes and reads back, through its own writers and readers.

Every path gets text from all Unicode categories plus the characters that broke or could break
a line-, byte- or JSON-based format: the line and paragraph separators (U+2028 is in real GDPval
prompts), NUL and other controls, bidi controls, BOM, noncharacters and astral characters.

Lone surrogates (U+D800-U+DFFF alone) cannot be encoded as UTF-8, and a model's JSON reply can
carry them (`"\\ud800"`). What the project does with them, per path:
- model text in result.json (`deliverable_text`, `error`) and hence results.parquet and the
  submission parquet: replaced by U+FFFD (`gdpval.sample.storable`), never a crash;
- the transcript: kept, JSON-escaped (`\\ud800`), so json.loads gives the model's text back;
- CR status, Events and the ledger ConfigMap go through the Kubernetes client's ASCII JSON, so
  they never fail to encode (the API server then stores U+FFFD);
- dataset text (manifest, submission) and run settings never hold one: a parquet whose text is
  not UTF-8 is refused as unreadable, settings given as bytes that are not UTF-8 are refused in
  one line, and the API server's JSON cannot carry one into a spec.
Example counts are small and derandomized, so CI sees the same cases every time.
"""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser

import httpx2
import openai
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given
from kubernetes.client import ApiClient

from gdpval import contract
from gdpval.agent.transcript import Transcript
from gdpval.api.v1alpha1 import KIND, Condition, GdpvalRunSpec, GdpvalRunStatus, SectorCounts
from gdpval.controller.pure import ledger, queue, workload
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure import names as n
from gdpval.controller.pure.status import blocked_status, status_patch
from gdpval.dataset.errors import DatasetError
from gdpval.dataset.models import DatasetRef, Sample, Task, sample_id
from gdpval.dataset.parquet import read_tasks
from gdpval.judge.models import ItemScore, JudgeResults, SampleScore
from gdpval.judge.store import load_results, load_scores, write_results, write_score
from gdpval.manifest import ManifestEntry, RunRecord, dump_manifest, load_manifest
from gdpval.report import write_report
from gdpval.runner.attempt import Attempt, SandboxView, commit, run_attempt
from gdpval.sample import ErrorKind, SampleResult, SampleStatus, storable
from gdpval.settings import RunSettings
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from gdpval.submission.build import build_submission
from support import runs
from support.text import EVERY_LISTED, LONE, NAME, PROFILE, TEXT, WITH_LONE


def json_equal(text: str) -> str:
    """What a JSON reader gives back for `text`: itself, unless adjacent lone surrogates form a pair."""
    return json.loads(json.dumps(text))


def kube_wire(body: object) -> object:
    """A body as the Kubernetes client sends it (sanitize, then json.dumps: ASCII) and reads it back."""
    sent = json.dumps(ApiClient().sanitize_for_serialization(body))
    assert sent.isascii()
    return json.loads(sent)


@pytest.fixture
def storage(tmp_path) -> LocalStorage:
    return LocalStorage(tmp_path / "out")


# --- manifest.jsonl and run.json ----------------------------------------------------------------


def task(prompt: str, text: str = "", task_id: str = "t-1", name: str = "a.txt") -> Task:
    path = f"reference_files/0123abcd/{name}"
    return Task(
        task_id=task_id,
        sector=text or "s",
        occupation=text or "o",
        prompt=prompt,
        reference_files=[path],
        reference_file_urls=[f"https://h/{path}"],
        reference_file_hf_uris=[f"hf://d/{path}"],
        rubric_pretty=text,
        rubric_json=json.dumps([{"criterion": text}], ensure_ascii=False),
    )


def manifest_roundtrip(storage: LocalStorage, entries: list[ManifestEntry]) -> list[ManifestEntry]:
    storage.put_text(layout.manifest("r"), dump_manifest(entries))
    return load_manifest(storage.get_text(layout.manifest("r")))


@PROFILE
@given(prompt=TEXT, text=TEXT, task_id=NAME, name=NAME.filter(lambda s: "/" not in s and s not in (".", "..")))
@example(prompt="a\u2028b\u2029c\x85d", text="\x00", task_id="\u2028", name="x\u2028y.pdf")
def test_manifest(storage, prompt, text, task_id, name):
    entries = [
        ManifestEntry(sample=Sample.of(task_id, 0), task=task(prompt, text, task_id, name)),
        ManifestEntry(sample=Sample.of("next", 0), task=task("after")),
    ]
    assert manifest_roundtrip(storage, entries) == entries


def settings_with(text: str, name: str) -> dict:
    """Every free-text run setting carrying `text`."""
    return {
        "model": {"name": name, "extraBody": {"note": text, text: [text]}},
        "dataset": {"id": f"s3://bucket/{text}"},
        "selection": {"sectors": [name], "occupations": [name], "taskIds": [name]},
        "prompt": {"system": text or "none", "template": text.replace("{", "{{").replace("}", "}}") + "{prompt}"},
    }


@PROFILE
@given(text=TEXT, name=NAME)
def test_run_json(storage, text, name):
    record = RunRecord(
        run_name="r",
        settings=RunSettings.model_validate(settings_with(text, name)),
        dataset=DatasetRef(source="s3", location=f"s3://bucket/{text}", revision=name),
    )
    storage.put_text(layout.run_json("r"), record.dump())
    assert RunRecord.model_validate_json(storage.get_text(layout.run_json("r"))) == record


# --- result.json, the transcript, results.parquet and the submission parquet ------------------


def attempt_for(prompt: str = "p", task_id: str = "t-1") -> Attempt:
    entry = ManifestEntry(sample=Sample.of(task_id, 0), task=task(prompt, task_id=task_id))
    return Attempt(runs.record("r"), entry, 1)


def result_roundtrip(storage: LocalStorage, attempt: Attempt, text: str, error: str) -> SampleResult:
    """Through the runner's own commit, then read as the submission builder reads it."""
    result = SampleResult(
        sample_id=attempt.sample_id,
        task_id=attempt.entry.sample.task_id,
        status=SampleStatus.failed,
        error_kind=ErrorKind.internal,
        error=error,
        deliverable_text=text,
    )
    commit(attempt, storage, result, None, None)
    return SampleResult.model_validate_json(storage.get_text(attempt.keys.result))


@PROFILE
@given(text=WITH_LONE, error=WITH_LONE)
@example(text="answer \ud800 and \udfff", error="\ud83d")
def test_result_json(storage, text, error):
    back = result_roundtrip(storage, attempt_for(), text, error)
    assert (back.deliverable_text, back.error) == (storable(text), storable(error))
    if not re.search("[\ud800-\udfff]", text + error):
        assert (back.deliverable_text, back.error) == (text, error)


@PROFILE
@given(content=WITH_LONE, arguments=WITH_LONE)
@example(content="one\u2028line\rstill\x85one", arguments="\ud800")
def test_transcript(tmp_path, content, arguments):
    path = tmp_path / "transcript.jsonl"
    path.unlink(missing_ok=True)  # one file per example (the transcript appends)
    with Transcript(path) as transcript:
        transcript.event("response", content=content, tool_calls=[{"arguments": arguments}])
        transcript.event("end", status="succeeded")
    lines = path.read_bytes().decode("utf-8").split("\n")  # strict UTF-8; lines end at \n only
    assert lines[-1] == "" and len(lines) == 3
    first = json.loads(lines[0])
    assert (first["content"], first["tool_calls"][0]["arguments"]) == (json_equal(content), json_equal(arguments))
    assert json.loads(lines[1])["event"] == "end"


def package_roundtrip(storage: LocalStorage, tasks: list[Task], answers: list[str]) -> tuple[list[dict], list[dict]]:
    """A run with every sample committed, built by build_submission; (submission rows, results rows)."""
    entries = runs.entries(tasks)
    runs.write_run(storage, "r", entries)
    for entry, answer in zip(entries, answers, strict=True):
        result = runs.failed(entry, 1).model_copy(update={"deliverable_files": []})
        result = SampleResult.model_validate(result.model_dump() | {"deliverable_text": answer, "error": answer})
        runs.commit(storage, "r", entry, 1, result)
    build_submission(storage, "r")
    root = storage.root / "runs/r"
    return (pq.read_table(root / "submission/data/train-00000-of-00001.parquet").to_pylist(), pq.read_table(root / "results.parquet").to_pylist())


@PROFILE
@given(prompt=TEXT, text=TEXT, answer=WITH_LONE, task_id=NAME.filter(lambda s: s.strip() and "/" not in s and s not in (".", "..")))
@example(prompt="a\u2028b", text="\u202e\x00", answer="\ud800", task_id="\u2029")
def test_results_and_submission_parquet(storage, prompt, text, answer, task_id):
    tasks = [task(prompt, text, task_id), task("other", task_id="other")]
    rows, results = package_roundtrip(storage, tasks, [answer, "fine"])
    by_id = {r["task_id"]: r for r in rows}
    row = by_id[task_id]
    source = tasks[0]
    for column in ("sector", "occupation", "prompt", "reference_files", "reference_file_urls", "rubric_pretty", "rubric_json"):
        assert row[column] == getattr(source, column), column
    [result] = [r for r in results if r["task_id"] == task_id]
    assert result["error"] == storable(answer)


# --- CR status, Events, the ledger ConfigMap, pod arguments and environment ------------------


def context(**spec) -> m.RunContext:
    base = {"model": {"name": "m", "baseURL": "http://10.0.0.1:8000/v1"}, "output": {"url": "s3://bucket/pre", "endpoint": "http://10.0.0.1:9000"}}
    return m.RunContext("run", "ns", "uid-1", GdpvalRunSpec.model_validate(base | spec), "agent:1", "sandbox:1")


@PROFILE
@given(message=WITH_LONE, text=TEXT)
@example(message="x" * 1023 + "\U0001f600\u2028", text="\u2028")
def test_cr_status(message, text):
    previous = GdpvalRunStatus(
        state="Running",
        dataset_revision=text,
        submission_uri=f"s3://b/{text}",
        conditions=[Condition(type="Prepared", status="True", reason="Prepared", message=text)],
    )
    status = blocked_status(previous, 2, "SecretNotFound", message, 1.0e9)
    wire = kube_wire({"status": status_patch(status)})["status"]
    back = GdpvalRunStatus.model_validate(wire)
    assert back.dataset_revision == text and back.submission_uri == f"s3://b/{text}"
    ready = {c.type: c for c in back.conditions}["Ready"]
    assert ready.message == json_equal(message[:1024])
    if not re.search("[\ud800-\udfff]", message):
        assert back == status


@PROFILE
@given(sector=NAME, other=NAME)
@example(sector="Ünïcode \u2028 sector", other="\x00\u202e")
def test_cr_status_sector_counts(sector, other):
    """status.sectors is keyed by the dataset's sector names, whatever their text."""
    status = GdpvalRunStatus(state="Running", sectors={sector: SectorCounts(total=3, succeeded=1), other: SectorCounts(total=1, failed=1)})
    back = GdpvalRunStatus.model_validate(kube_wire({"status": status_patch(status)})["status"])
    assert back.sectors == status.sectors


@PROFILE
@given(message=WITH_LONE, reason=NAME)
def test_event(message, reason):
    event = m.event("run", "ns", "uid-1", KIND, reason, message, "2026-01-01T00:00:00Z", "abc")
    back = kube_wire(event)
    assert back["message"] == json_equal(message[:1024]) and back["reason"] == reason


@PROFILE
@given(message=WITH_LONE, evicted=TEXT)
@example(message="x" * 40000 + "\u2028", evicted="preempted by \u202e \x00")
def test_kueue_workload_status(message, evicted):
    """A queued run's Workload: Kueue's eviction message read back, the run's end message written (both arbitrary text)."""
    body = {"metadata": {"name": "wl", "resourceVersion": "1"}, "status": {"admission": {"clusterQueue": "cq"}, "conditions": []}}
    body["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": evicted},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": evicted},
    ]
    view = workload.parse_workload(kube_wire(body))
    assert view.evicted_message == evicted
    released = {c["type"]: c for c in kube_wire(queue.release_patch(view, 1.0e9))["status"]["conditions"]}
    assert released["QuotaReserved"]["message"] == evicted
    finished = {c["type"]: c for c in kube_wire(queue.finish_patch(view, False, message, 1.0e9))["status"]["conditions"]}["Finished"]
    assert finished["message"] == json_equal(message[:32768])


@PROFILE
@given(reason=WITH_LONE, raw=TEXT)
@example(reason="model said \u2028 \x00 \ud800", raw="two words\u2028and a line\nbreak")
def test_ledger_configmap(reason, raw):
    finished = ledger.first_attempt().finish(5.0, ledger.ResultSummary(succeeded=False, reason=reason, input_tokens=3))
    kept = ledger.Entry(attempt=2, outcome=ledger.Outcome.lost, reason=raw)
    configmap = m.ledger_configmap(context(), ledger.encode({"sample-a-r0": finished, "sample-b-r0": kept}))
    back = ledger.decode(kube_wire(configmap)["data"])
    assert back == {"sample-a-r0": finished, "sample-b-r0": kept}
    assert re.fullmatch(r"[A-Za-z0-9_.:-]*", back["sample-a-r0"].reason)


@PROFILE
@given(sample=NAME, reason=WITH_LONE)
@example(sample="Ünïcode task \u2028 #1/r0", reason="model said \u2028 \x00 \ud800")
def test_ledger_archive_segment(sample, reason):
    """A segment of ended entries, as written to the run's folder (UTF-8 JSON; sample ids are any text there)."""
    ended = ledger.first_attempt().finish(5.0, ledger.ResultSummary(succeeded=False, reason=reason, output_tokens=7))
    text = ledger.encode_segment({sample: ended, "plain-r0": ledger.first_attempt().finish(6.0, None)})
    back = ledger.decode_segment(text.encode("utf-8").decode("utf-8"))
    assert back[sample] == ended and back["plain-r0"].outcome == ledger.Outcome.lost


@PROFILE
@given(text=TEXT, name=NAME, task_id=NAME)
@example(text="\x00\u2028\u202e\U0010ffff", name="\u2029", task_id="Ünïcode task \u2028 #1")
def test_pod_arguments_and_environment(text, name, task_id):
    spec = settings_with(text, name)
    spec["model"]["baseURL"] = "http://10.0.0.1:8000/v1"
    ctx = context(**spec)
    job = kube_wire(m.prepare_job(ctx))
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert RunSettings.model_validate_json(env[contract.SETTINGS_ENV]) == RunSettings.of(ctx.spec)  # as `gdpval prepare` reads it
    sample = sample_id(task_id, 0)
    pod = kube_wire(m.sample_pod(ctx, sample, 1))
    assert pod["metadata"]["annotations"][n.A_SAMPLE_ID] == sample
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", sample) and len(sample) <= 63
    for c in (*pod["spec"]["initContainers"], *pod["spec"]["containers"], container):
        assert "--sample" not in c["command"] or c["command"][c["command"].index("--sample") + 1] == sample
        for word in [*c["command"], *(e.get("value") or "" for e in c.get("env", []))]:
            assert "\x00" not in word  # execve cannot pass NUL in an argument or an environment value


@PROFILE
@given(text=TEXT)
@example(text="\x00\u2028\u202e\U0010ffff")
def test_sample_pod_children_keep_the_runs_annotations(text):
    """spec.pod's annotations reach the sample pod, its token Secret and its NetworkPolicy whole, through the client's encoding."""
    ctx = context(pod={"annotations": {"gdpval.io/note": text}})
    for body in (m.sample_pod(ctx, "s-r0", 1), m.token_secret(ctx, "token"), m.network_policy(ctx, {})):
        assert kube_wire(body)["metadata"]["annotations"]["gdpval.io/note"] == text


# --- the listed characters everywhere at once, a model reply over HTTP, and a 10 MB prompt ----


def test_every_listed_character_through_every_file(storage, tmp_path):
    text = EVERY_LISTED
    entries = [ManifestEntry(sample=Sample.of("t-1", 0), task=task(text, text))]
    assert manifest_roundtrip(storage, entries) == entries
    back = result_roundtrip(storage, attempt_for(), text + "".join(LONE), text)
    assert back.deliverable_text == text + "\ufffd" * len(LONE) and back.error == text
    rows, _ = package_roundtrip(LocalStorage(tmp_path / "package"), [task(text, text)], [text])
    assert rows[0]["prompt"] == text and rows[0]["deliverable_text"] == text


def completion(message: dict) -> httpx2.Response:
    """A chat completion as a server sends it: JSON bytes, non-ASCII escaped (so lone surrogates can travel)."""
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return httpx2.Response(200, headers={"content-type": "application/json"}, content=json.dumps(body).encode())


class Output:
    output, exit_code, timed_out = "ok", 0, False


class Tools:
    def call(self, tool: str, arguments: dict, timeout: float) -> Output:
        return Output()


def test_a_reply_with_lone_surrogates_is_committed(storage, tmp_path):
    """The model's tool call and answer carry lone surrogates: the attempt is committed, nothing crashes."""
    replies = iter(
        [
            completion(
                {
                    "content": "thinking \ud800",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "echo \ud83d"}'}}],
                }
            ),
            completion({"content": "done \udfff with \U0001f600"}),
        ]
    )
    transport = httpx2.MockTransport(lambda request: next(replies))
    client = openai.OpenAI(base_url="http://model.test/v1", api_key="k", max_retries=0, http_client=httpx2.Client(transport=transport))
    attempt = attempt_for("a\u2028prompt")
    (tmp_path / "ws").mkdir()
    result = run_attempt(attempt, storage, client, Tools(), SandboxView("/w", "/r", []), tmp_path / "ws", tmp_path / "scratch")
    assert result.status == SampleStatus.succeeded
    stored = SampleResult.model_validate_json(storage.get_text(attempt.keys.result))
    assert stored.deliverable_text == "done \ufffd with \U0001f600"
    events = [json.loads(line) for line in storage.get_text(attempt.keys.transcript).split("\n") if line]
    assert "thinking \ud800" in [e.get("content") for e in events]  # the transcript keeps what the model sent
    assert any("a\u2028prompt" in (e.get("user") or "") for e in events)


def test_a_10_mb_prompt(storage, tmp_path):
    prompt = ("Quarterly review\u2028— see ‘Budget (4).xlsx’ … €1\u202f204 📈\n" * 250_000)[: 10 * 1024 * 1024]
    assert len(prompt) == 10 * 1024 * 1024
    entries = [ManifestEntry(sample=Sample.of("t-1", 0), task=task(prompt))]
    assert manifest_roundtrip(storage, entries)[0].task.prompt == prompt
    rows, _ = package_roundtrip(LocalStorage(tmp_path / "package"), [task(prompt)], ["answer"])
    assert rows[0]["prompt"] == prompt
    with Transcript(tmp_path / "transcript.jsonl") as transcript:
        transcript.event("start", user=prompt)
    assert json.loads((tmp_path / "transcript.jsonl").read_text(encoding="utf-8"))["user"] == prompt


# --- where lone surrogates cannot enter: dataset text and run settings -------------------------


def test_dataset_text_that_is_not_utf8_is_refused():
    columns = {c: pa.array(["x"]) for c in ("task_id", "sector", "occupation")}
    columns["prompt"] = pa.array([b"bad \xed\xa0\x80 text"], pa.binary()).view(pa.string())  # a UTF-8-encoded surrogate
    columns |= {c: pa.array([[]], pa.list_(pa.string())) for c in ("reference_files", "reference_file_urls", "reference_file_hf_uris")}
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    with pytest.raises(DatasetError, match="not UTF-8.*re-download"):
        read_tasks("data/train.parquet", buffer.getvalue())


# --- the HTML report ----------------------------------------------------------------------------


class _PreText(HTMLParser):
    """The text of each <pre> of a page, character references resolved, as a browser's tokenizer reads it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.inside, self.blocks = False, []

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self.inside = True
            self.blocks.append("")

    def handle_endtag(self, tag):
        self.inside = self.inside and tag != "pre"

    def handle_data(self, data):
        if self.inside:
            self.blocks[-1] += data


@PROFILE
@given(prompt=TEXT, reply=WITH_LONE)
@example(prompt="a\u2028b</pre><script>x</script>\r\n&amp;", reply="\ud800 <b>\x00")
def test_report_html(storage, prompt, reply):
    """A prompt and a model reply reach the report's transcript view whole (a lone surrogate as U+FFFD)."""
    entry = ManifestEntry(sample=Sample.of("t-1", 0), task=task(prompt))
    runs.write_run(storage, "r", [entry])
    runs.commit(storage, "r", entry, 1, runs.succeeded(entry, 1, {}))
    events = [{"event": "start", "system": None, "user": prompt}, {"event": "response", "content": reply}]
    storage.put_text(layout.attempt_keys("r", entry.sample.sample_id, 1).transcript, "".join(json.dumps(e) + "\n" for e in events))
    write_report(storage, "r")
    parser = _PreText()
    parser.feed(storage.get_text(layout.report("r")))
    assert parser.blocks == ([prompt, storable(json_equal(reply))] if reply else [prompt])


@PROFILE
@given(text=TEXT, reply=WITH_LONE)
@example(text="Ünïcode sector \u2028 \x00 \U0010ffff", reply="reason \ud800 \u2029 \x85 end")
def test_judge_scores_and_results(storage, text, reply):
    """A rubric criterion, a sector and a judge model's reason survive the judge's cache and results.json."""
    item = ItemScore(item_id=text or "i", criterion=text, points=2, score=1, reason=reply)
    score = SampleScore(sample_id="t-1-r0", task_id=text, sector=text, occupation=text, judge_model="j", status="failed", error=reply, items=[item])
    write_score(storage, "r", score)
    results = JudgeResults.of("r", "j", "now", [score])
    write_results(storage, results)
    back = load_scores(storage, "r")["t-1-r0"]
    assert (back.sector, back.items[0].criterion, back.items[0].reason, back.error) == (text, text, storable(reply), storable(reply))
    assert load_results(storage, "r") == results and set(load_results(storage, "r").by_sector) == {text}
