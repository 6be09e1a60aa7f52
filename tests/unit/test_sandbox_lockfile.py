"""images/sandbox/lockfile.py's split of one resolution into the `full` and `full-torch` locks: a pin
goes to full-torch only when nothing `full` asks for needs it, following the extras each asks for."""

from __future__ import annotations

import importlib.util
import zipfile

from infra.paths import REPO_ROOT

_SPEC = importlib.util.spec_from_file_location("lockfile", REPO_ROOT / "images" / "sandbox" / "lockfile.py")
assert _SPEC is not None and _SPEC.loader is not None
lockfile = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(lockfile)

NONE = frozenset()
GRAPH = {
    "fastapi": [("starlette", NONE, None), ("uvicorn", frozenset({"standard"}), "all")],
    "starlette": [],
    "uvicorn": [("httptools", NONE, "standard"), ("rich", NONE, "debug")],
    "httptools": [],
    "rich": [("markdown-it-py", NONE, None)],
    "markdown-it-py": [],
    "torch": [("nvidia-cublas-cu12", NONE, None), ("sympy", NONE, None), ("httptools", NONE, None)],
    "keras": [("rich", NONE, None)],
    "sympy": [],
    "nvidia-cublas-cu12": [],
    "unreached": [],
}


def test_the_extra_flavour_gets_only_what_the_base_does_not_need() -> None:
    base = {("fastapi", frozenset({"all"})), ("sympy", NONE)}
    extra = {("torch", NONE), ("keras", NONE)}
    # httptools: fastapi[all] -> uvicorn[standard] needs it, so it stays; rich only through uvicorn's
    # `debug` extra, which nothing asks for, so it goes with keras (and markdown-it-py with it).
    assert lockfile.split_pins(GRAPH, base, extra) == {"torch", "keras", "nvidia-cublas-cu12", "rich", "markdown-it-py"}


def test_without_the_extra_a_dependency_of_an_extra_is_not_the_base_s() -> None:
    assert "httptools" in lockfile.split_pins(GRAPH, {("fastapi", NONE)}, {("torch", NONE)})


def test_requirements_read_names_extras_and_markers(tmp_path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: Demo",
            "Version: 1.0",
            "Requires-Dist: Typing_Extensions>=4",
            'Requires-Dist: uvicorn[standard,Extra-Two] (>=0.12); extra == "all"',
            "Requires-Dist: nvidia-nccl-cu12==2.21.5; platform_system == 'Linux'",
            "",
        ]
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo-1.0.dist-info/METADATA", metadata)
    assert lockfile.requirements(wheel) == [
        ("typing-extensions", NONE, None),
        ("uvicorn", frozenset({"standard", "extra-two"}), "all"),
        ("nvidia-nccl-cu12", NONE, None),
    ]


def test_roots_keep_the_extras_a_requirements_file_asks_for(tmp_path) -> None:
    listed = tmp_path / "requirements.in"
    listed.write_text("--prefer-binary\n# a comment\nfastapi[all]==0.95.2\nPyPDF2<3  # held back\nrapidfuzz~=3.10.1\n")
    assert lockfile.roots(listed) == {("fastapi", frozenset({"all"})), ("pypdf2", NONE), ("rapidfuzz", NONE)}
