"""Where a file is rendered: the judge pod's sidecar when the judge Job names one, else the local full runtime, else the host child."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpval import contract
from gdpval.render import child


def test_a_judge_pod_renders_in_its_sidecar_and_the_label_names_the_image():
    env = {contract.RENDER_URL_ENV: "http://127.0.0.1:7000", contract.RENDER_IMAGE_ENV: "localhost/gdpval-sandbox:full-dev"}
    asked: list[bool] = []
    chosen = child.backend(env, lambda: asked.append(True), office=lambda pod: True)  # type: ignore[arg-type,func-returns-value]
    assert chosen == child.PodSandbox("http://127.0.0.1:7000", Path(contract.RENDER_TOKEN_FILE), Path(contract.RENDER_DIR), "localhost/gdpval-sandbox:full-dev")
    assert asked == [] and child.renderer_label(chosen) == "pod sidecar of image localhost/gdpval-sandbox:full-dev"
    assert not child.text_only(chosen)


def test_a_sidecar_image_without_libreoffice_falls_back_to_the_host_child_and_says_text_only():
    """A run whose sandbox image is not the full one (slim: no LibreOffice) renders text only, and says so."""
    env = {contract.RENDER_URL_ENV: "http://127.0.0.1:7000", contract.RENDER_IMAGE_ENV: "localhost/gdpval-sandbox:slim-dev"}
    asked: list[str] = []

    def office(pod: child.PodSandbox) -> bool:
        asked.append(pod.image)
        return False

    chosen = child.backend(env, lambda: pytest.fail("a pod never renders in a local runtime"), office=office)
    assert chosen is None and asked == ["localhost/gdpval-sandbox:slim-dev"]
    assert child.text_only(chosen) and "text only" in child.renderer_label(chosen)


def test_elsewhere_the_local_runtime_decides_and_none_means_the_text_only_host_child():
    assert child.backend({}, lambda: None) is None
    assert child.backend({contract.RENDER_URL_ENV: ""}, lambda: None) is None
    assert "text only" in child.renderer_label(None)
