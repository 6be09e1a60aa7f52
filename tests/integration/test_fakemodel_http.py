"""The fake model over real HTTP, driven by the real ``openai`` client and real tool runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from gdpval.fakemodel import DELIVERABLE_NAME, FakeModelServer, parse_inventory, start_background
from support.polling import wait_until

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {arg: {"type": "string"}}}}}
    for name, arg in (("bash", "command"), ("python_exec", "code"))
]
NAMES = ["Budget (final) & notes.xlsx", "Über résumé – 报告.docx", "plain.txt"]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    with start_background(retry_after=0.2, slow_seconds=0.6) as running:
        yield running


def client_for(server: FakeModelServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=kwargs.pop("api_key", "unused"), **kwargs)


def make_task(base: Path, names: list[str]) -> tuple[str, Path, dict[str, int]]:
    """A workspace and reference folder in the agent's layout; returns prompt, workspace, true sizes."""
    root, workspace = base / "reference files & (copies)", base / "workspace é"
    workspace.mkdir(parents=True)
    sizes: dict[str, int] = {}
    for index, name in enumerate(names):
        path = root / f"{index:02x}ab" / name
        path.parent.mkdir(parents=True)
        path.write_bytes(os.urandom(100 * index + 7))
        sizes[str(path)] = path.stat().st_size
    lines = ["Tâche: inventory the files\nSecond line.", "", "---", f"Working directory: {workspace}"]
    lines.append(f"Deliverables folder: {workspace}/deliverable_files")
    if names:
        lines.append(f"Reference files (read-only), under {root}:")
        lines += [f"- {path}" for path in sizes]
    else:
        lines.append("Reference files: none")
    lines.append("Save every file the task asks for in the deliverables folder.")
    return "\n".join(lines), workspace, sizes


def run_tool(name: str, raw_arguments: str, workspace: Path) -> str:
    """The agent's part, minimally: run the call in the workspace or report why not."""
    if name not in ("bash", "python_exec"):
        return f"error: unknown tool {name!r}; available tools: bash, python_exec"
    try:
        arguments = json.loads(raw_arguments)
    except ValueError as exc:
        return f"error: the arguments are not valid JSON ({exc})"
    if name == "bash":
        command = ["bash", "-c", arguments["command"]]
    else:
        command = [sys.executable, "-I", "-S", "-c", arguments["code"]]
    done = subprocess.run(command, cwd=workspace, capture_output=True, text=True, timeout=30)
    return f"{done.stdout}{done.stderr}\n[exit code {done.returncode}]"


def drive(clients: openai.OpenAI | list[openai.OpenAI], user: str, workspace: Path, **extra: Any) -> tuple[str, list[dict[str, Any]]]:
    """Converse until the model answers without a tool call (turn i uses client i mod n)."""
    clients = clients if isinstance(clients, list) else [clients]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Work carefully."}, {"role": "user", "content": user}]
    for turn in range(20):
        client = clients[turn % len(clients)]
        response = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS, **extra)
        message = response.choices[0].message
        if not message.tool_calls:
            assert response.choices[0].finish_reason == "stop"
            return message.content or "", messages
        assert response.choices[0].finish_reason == "tool_calls"
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = run_tool(call.function.name, call.function.arguments, workspace)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError("the scripted model never finished")


def inventory(workspace: Path) -> str:
    return (workspace / "deliverable_files" / DELIVERABLE_NAME).read_text(encoding="utf-8")


def first_request(tmp_path: Path) -> list[dict[str, Any]]:
    user, _, _ = make_task(tmp_path, NAMES)
    return [{"role": "user", "content": user}]


def test_whole_conversation_inventories_every_reference_file(server: FakeModelServer, tmp_path: Path):
    user, workspace, sizes = make_task(tmp_path, NAMES)
    answer, messages = drive(client_for(server), user, workspace)
    assert answer == "Inventoried 3 reference files into reference_inventory.md."
    assert parse_inventory(inventory(workspace)) == sizes
    assert "Task: Tâche: inventory the files" in inventory(workspace)
    assert len([m for m in messages if m["role"] == "tool"]) == 3


def test_any_server_instance_continues_a_conversation(tmp_path: Path):
    """Stateless by design: alternating turns between two servers changes nothing."""
    user, workspace, sizes = make_task(tmp_path, NAMES)
    with start_background() as one, start_background() as two:
        answer, _ = drive([client_for(one), client_for(two)], user, workspace)
    assert answer.startswith("Inventoried 3") and parse_inventory(inventory(workspace)) == sizes


def test_missing_reference_is_reported_not_fatal(server: FakeModelServer, tmp_path: Path):
    user, workspace, sizes = make_task(tmp_path, NAMES)
    gone = next(iter(sizes))
    Path(gone).unlink()
    Path(gone).parent.rmdir()
    answer, _ = drive(client_for(server), user, workspace)
    assert answer.endswith("1 named in the prompt were not found.")
    assert parse_inventory(inventory(workspace)) == {p: n for p, n in sizes.items() if p != gone}
    assert f"- missing: {gone}" in inventory(workspace)


def test_listing_ignores_other_tasks_in_a_shared_root(server: FakeModelServer, tmp_path: Path):
    user, workspace, sizes = make_task(tmp_path, NAMES[:2])
    stranger = Path(next(iter(sizes))).parent.parent / "ffother" / "other task.pdf"
    stranger.parent.mkdir()
    stranger.write_bytes(b"not ours")
    drive(client_for(server), user, workspace)
    assert parse_inventory(inventory(workspace)) == sizes


def test_task_without_references(server: FakeModelServer, tmp_path: Path):
    user, workspace, _ = make_task(tmp_path, [])
    answer, _ = drive(client_for(server), user, workspace)
    assert "no reference files" in answer
    assert "No reference files were provided" in inventory(workspace)


def test_response_shape_and_usage(server: FakeModelServer, tmp_path: Path):
    messages = first_request(tmp_path)
    response = client_for(server).chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
    again = client_for(server).chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
    assert response.object == "chat.completion" and response.model == "scripted" and response.id.startswith("chatcmpl-")
    call = response.choices[0].message.tool_calls[0]
    assert call.type == "function" and call.function.name == "bash" and "find -L" in json.loads(call.function.arguments)["command"]
    usage = response.usage
    assert usage.prompt_tokens > 0 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert again.usage == usage and again.choices[0].message == response.choices[0].message


def test_models_endpoint_and_unknown_model(server: FakeModelServer):
    client = client_for(server)
    assert [m.id for m in client.models.list()] == ["scripted"]
    assert client.models.retrieve("scripted").id == "scripted"
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "model_not_found"


def test_bad_requests_are_openai_shaped(server: FakeModelServer):
    client = client_for(server, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}], extra_body={"fake_dialects": ["stream-only"]})
    assert caught.value.code == "unsupported_value" and "stream=true" in caught.value.message
    with pytest.raises(openai.BadRequestError, match="unknown dialect"):
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}], extra_body={"fake_dialects": ["grpc"]})
    with pytest.raises(openai.BadRequestError, match="fake_faults"):
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}], extra_body={"fake_faults": {"teapot": 1}})
    raw = httpx2.post(server.base_url + "/chat/completions", content=b"{not json")
    assert raw.status_code == 400 and set(raw.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx2.get(server.base_url + "/chat/completions").status_code == 405
    assert httpx2.get(server.url + "/v2/elsewhere").json()["error"]["code"] == "unknown_url"


def test_api_key_is_enforced(tmp_path: Path):
    with start_background(api_key="sk-right") as guarded:
        with pytest.raises(openai.AuthenticationError) as caught:
            client_for(guarded, api_key="sk-wrong", max_retries=0).models.list()
        assert caught.value.code == "invalid_api_key"
        bare = httpx2.post(guarded.base_url + "/chat/completions", json={"model": "scripted", "messages": []})
        assert bare.status_code == 401 and bare.json()["error"]["type"] == "invalid_request_error"
        user, workspace, sizes = make_task(tmp_path, NAMES[:1])
        drive(client_for(guarded, api_key="sk-right"), user, workspace)
        assert parse_inventory(inventory(workspace)) == sizes


def test_429_carries_retry_after_and_a_retry_passes(server: FakeModelServer, tmp_path: Path):
    messages, faults = first_request(tmp_path), {"fake_faults": {"429": 1.0}}
    client = client_for(server, max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="scripted", messages=messages, extra_body=faults)
    assert caught.value.response.headers["retry-after"] == "0.2" and caught.value.code == "rate_limit_exceeded"
    assert client.chat.completions.create(model="scripted", messages=messages, extra_body=faults).choices


def test_client_retries_honour_retry_after(server: FakeModelServer, tmp_path: Path):
    user, workspace, sizes = make_task(tmp_path, NAMES)
    started = time.monotonic()
    drive(client_for(server, max_retries=2), user, workspace, extra_body={"fake_faults": {"429": 1.0}})
    assert time.monotonic() - started >= 4 * 0.2
    assert parse_inventory(inventory(workspace)) == sizes


def test_500_then_retry_passes(server: FakeModelServer, tmp_path: Path):
    messages, faults = first_request(tmp_path), {"fake_faults": {"500": 1.0}}
    client = client_for(server, max_retries=0)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="scripted", messages=messages, extra_body=faults)
    assert caught.value.type == "server_error"
    assert client.chat.completions.create(model="scripted", messages=messages, extra_body=faults).choices


def test_context_length_is_permanent(server: FakeModelServer, tmp_path: Path):
    messages, faults = first_request(tmp_path), {"fake_faults": {"context_length": 1.0}}
    for _ in range(2):
        with pytest.raises(openai.BadRequestError) as caught:
            client_for(server).chat.completions.create(model="scripted", messages=messages, extra_body=faults)
        assert caught.value.code == "context_length_exceeded"


def test_slow_response_times_out_once_then_answers(server: FakeModelServer, tmp_path: Path):
    """The server's own count says the repeat was answered without the delay (a clock would race the load)."""
    messages, faults = first_request(tmp_path), {"fake_faults": {"slow": 1.0}}
    before = server.stats()["faults"].get("slow", 0)
    with pytest.raises(openai.APITimeoutError):
        client_for(server, max_retries=0, timeout=0.2).chat.completions.create(model="scripted", messages=messages, extra_body=faults)
    reply = client_for(server, max_retries=0, timeout=30).chat.completions.create(model="scripted", messages=messages, extra_body=faults)
    assert reply.choices[0].message.tool_calls or reply.choices[0].message.content
    assert server.stats()["faults"].get("slow", 0) - before == 1


@pytest.mark.parametrize("fault", ["malformed", "unknown_tool"])
def test_bad_tool_calls_then_the_conversation_recovers(server: FakeModelServer, tmp_path: Path, fault: str):
    user, workspace, sizes = make_task(tmp_path, NAMES)
    answer, messages = drive(client_for(server), user, workspace, extra_body={"fake_faults": {fault: 1.0}})
    rejected = [m for m in messages if m["role"] == "tool" and m["content"].startswith("error:")]
    assert len(rejected) == 3
    assert answer.startswith("Inventoried 3") and parse_inventory(inventory(workspace)) == sizes


def test_concurrent_conversations_under_random_faults(tmp_path: Path):
    faults = {"429": 0.2, "500": 0.15, "malformed": 0.15, "unknown_tool": 0.15}
    with start_background(faults=faults, seed=3, retry_after=0.05, latency=0.01) as busy:
        tasks = [make_task(tmp_path / f"t{i}", NAMES[: i % 4]) for i in range(20)]
        client = client_for(busy, max_retries=3)
        with ThreadPoolExecutor(max_workers=20) as pool:
            list(pool.map(lambda task: drive(client, task[0], task[1]), tasks))
        stats = busy.stats()
    for _, workspace, sizes in tasks:
        assert parse_inventory(inventory(workspace)) == sizes
    assert set(stats["faults"]) == set(faults) and stats["statuses"][200] == stats["completions"]
    assert stats["requests"] == stats["completions"] + stats["faults"]["429"] + stats["faults"]["500"]


def test_serve_logs_url_and_stops_on_sigterm():
    code = "from gdpval.fakemodel import serve; serve('127.0.0.1', 0, model='m1')"
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        base_url = line.rsplit(" ", 1)[-1].strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        assert [m.id for m in openai.OpenAI(base_url=base_url, api_key="x").models.list()] == ["m1"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_hold_lets_some_replies_through_then_holds_until_release(tmp_path: Path):
    messages = first_request(tmp_path)
    with start_background(hold_after=1) as gated:
        client = client_for(gated, max_retries=0)

        def ask() -> Any:
            return client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)

        assert ask().choices  # the one reply let through
        with ThreadPoolExecutor(max_workers=2) as pool:
            pending = [pool.submit(ask) for _ in range(2)]
            wait_until(lambda: gated.stats()["held"] == 2, 10, "two held requests", 0.05)
            assert not any(future.done() for future in pending)
            assert [m.id for m in client.models.list()] == ["scripted"]  # only chat replies are held
            gated.release()
            assert all(future.result(timeout=10).choices for future in pending)
        stats = gated.stats()
        assert (stats["held"], stats["completions"]) == (0, 3)
        gated.hold()
        with ThreadPoolExecutor(max_workers=1) as pool:
            held = pool.submit(ask)
            wait_until(lambda: gated.stats()["held"] == 1, 10, "a held request", 0.05)
            gated.stop()  # lets held requests go, so no handler thread is left waiting
            assert wait([held], timeout=10).done


def test_cli_hold_and_http_control(tmp_path: Path):
    gdpval = str(Path(sys.executable).with_name("gdpval"))
    process = subprocess.Popen([gdpval, "fake-model", "--port", "0", "--hold-after", "0", "--api-key", "k"], stderr=subprocess.PIPE, text=True)
    try:
        base_url = process.stderr.readline().rsplit(" ", 1)[-1].strip()
        control = base_url.removesuffix("/v1") + "/fake"
        auth = {"Authorization": "Bearer k"}
        client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(client.chat.completions.create, model="scripted", messages=first_request(tmp_path))
            wait_until(lambda: httpx2.get(control + "/stats", headers=auth).json()["held"] == 1, 10, "a held request", 0.05)
            assert httpx2.get(control + "/stats").status_code == 401
            assert httpx2.post(control + "/hold", json={"after": -1}, headers=auth).status_code == 400
            assert httpx2.post(control + "/hold", json={"after": "2"}, headers=auth).status_code == 400
            assert httpx2.get(control + "/release", headers=auth).status_code == 405
            assert httpx2.post(control + "/open", headers=auth).status_code == 404
            assert not pending.done()
            released = httpx2.post(control + "/release", headers=auth)
            assert released.status_code == 200 and pending.result(timeout=10).choices
        assert httpx2.post(control + "/hold", json={"after": 1}, headers=auth).json()["held"] == 0
        stats = httpx2.get(control + "/stats", headers=auth).json()
        assert (stats["requests"], stats["completions"]) == (1, 1)  # control requests are not model requests
    finally:
        process.terminate()
        process.wait(timeout=10)
