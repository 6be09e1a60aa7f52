"""support.once: a costly fixture result computed once per session, shared by workers through a file lock."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from support.once import once_per_session, shared_dir


def _factory(base: Path) -> SimpleNamespace:
    return SimpleNamespace(getbasetemp=lambda: base)


def test_workers_share_their_common_parent_and_a_lone_session_its_own_folder(tmp_path: Path) -> None:
    base = tmp_path / "popen-gw1"
    assert shared_dir(SimpleNamespace(workerinput={}), _factory(base)) == tmp_path
    assert shared_dir(SimpleNamespace(), _factory(base)) == base


def test_a_second_caller_waits_for_the_first_and_reads_its_result(tmp_path: Path) -> None:
    config, factory, calls = SimpleNamespace(), _factory(tmp_path), []
    entered, release = threading.Event(), threading.Event()

    def slow() -> dict[str, str]:
        calls.append("slow")
        entered.set()
        assert release.wait(30)
        return {"lxml": "ok"}

    got: dict[str, object] = {}
    first = threading.Thread(target=lambda: got.setdefault("first", once_per_session(config, factory, "imports", slow)))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=lambda: got.setdefault("second", once_per_session(config, factory, "imports", lambda: calls.append("again"))))
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert calls == ["slow"] and got == {"first": {"lxml": "ok"}, "second": {"lxml": "ok"}}


def test_a_failed_compute_leaves_nothing_and_the_next_caller_computes(tmp_path: Path) -> None:
    config, factory = SimpleNamespace(), _factory(tmp_path)

    def broken() -> dict[str, str]:
        raise RuntimeError("podman is not there")

    with pytest.raises(RuntimeError, match="podman"):
        once_per_session(config, factory, "checks", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checks.lock"]
    assert once_per_session(config, factory, "checks", lambda: [1, 2]) == [1, 2]
