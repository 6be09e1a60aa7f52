"""A pod started ahead connects to its model endpoint before it says ready (agent.client.reach), over real sockets."""

from __future__ import annotations

import socket
import threading
import time

from gdpval.agent.client import reach


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_reach_connects_to_a_listening_endpoint():
    with socket.create_server(("127.0.0.1", 0)) as server:
        took = reach(f"http://127.0.0.1:{server.getsockname()[1]}/v1")
    assert took is not None and took < 5


def test_reach_tries_again_until_the_endpoint_listens():
    port = _free_port()
    opened = threading.Event()

    def listen_later() -> None:
        time.sleep(0.5)
        with socket.create_server(("127.0.0.1", port)) as server:
            opened.set()
            server.accept()[0].close()

    thread = threading.Thread(target=listen_later)
    thread.start()
    took = reach(f"http://127.0.0.1:{port}/v1", limit_s=30)
    thread.join(10)
    assert opened.is_set() and took is not None and 0.4 < took < 30


def test_reach_gives_up_after_its_limit_and_says_none():
    started = time.monotonic()
    assert reach(f"http://127.0.0.1:{_free_port()}/v1", limit_s=0.5) is None
    assert time.monotonic() - started < 5
