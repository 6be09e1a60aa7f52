"""Every watch event of one kind of object, recorded in the API server's order on a thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, config, watch


def api_client(kubeconfig: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


def _resource_version(listed: Any) -> str:
    return listed["metadata"]["resourceVersion"] if isinstance(listed, dict) else listed.metadata.resource_version


class EventRecorder(threading.Thread):
    """Records (type, object as a dict) from a list call's watch, starting at the list `start` makes,
    so nothing that happens after `start` returns is missed."""

    def __init__(self, list_call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self._call, self._args, self._kwargs = list_call, args, kwargs
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._version = ""
        self.error: BaseException | None = None

    def start(self) -> None:
        self._version = _resource_version(self._call(*self._args, **self._kwargs))
        super().start()

    def run(self) -> None:
        try:
            while not self._done.is_set():
                stream = watch.Watch().stream(self._call, *self._args, resource_version=self._version, timeout_seconds=2, **self._kwargs)
                for event in stream:
                    obj = event["raw_object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    self._version = obj["metadata"]["resourceVersion"]
                    with self._lock:
                        self._events.append((event["type"], obj))
        except BaseException as exc:  # surfaced by `events`, so a broken watch fails the test
            self.error = exc

    @property
    def events(self) -> list[tuple[str, dict[str, Any]]]:
        if self.error:
            raise AssertionError(f"the watch failed: {self.error!r}")
        with self._lock:
            return list(self._events)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)
