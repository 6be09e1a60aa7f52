"""Every package of the full image's list (the GDPval paper's, images/sandbox/requirements.in) imports,
in the image under podman and in the local runtime through a hardened bubblewrap sandbox.

A missing image, runtime or podman fails with what to run; it never skips. The torch family
(requirements-torch.in) is the full-torch flavour's: tests/images/test_paper_torch.py."""

from __future__ import annotations

import pytest

from support.once import once_per_session
from support.paper_packages import IMPORT_SCRIPT, MODULES, REQUIREMENTS_IN, TORCH_REQUIREMENTS_IN, listed, parse_imports
from support.sandbox_full import python_in_local_runtime, python_in_podman

IMPORTS_TIMEOUT_S = 900
LISTED = listed(REQUIREMENTS_IN.read_text())
MODULE_NAMES = sorted({MODULES[name] for name in LISTED if name in MODULES})


def test_every_listed_package_has_its_module_named() -> None:
    both = LISTED + listed(TORCH_REQUIREMENTS_IN.read_text())
    assert len(both) > 140
    assert sorted(set(both) - set(MODULES)) == [] and sorted(set(MODULES) - set(both)) == []


@pytest.fixture(scope="module", params=["local", "podman"])
def imported(request, tmp_path_factory) -> dict[str, str]:
    def compute() -> dict[str, str]:
        if request.param == "podman":
            return parse_imports(python_in_podman(IMPORT_SCRIPT, MODULE_NAMES, IMPORTS_TIMEOUT_S))
        workspace = tmp_path_factory.mktemp("imports") / "workspace"
        return parse_imports(python_in_local_runtime(IMPORT_SCRIPT, MODULE_NAMES, workspace, IMPORTS_TIMEOUT_S))

    return once_per_session(request.config, tmp_path_factory, f"paper-imports-{request.param}", compute)


@pytest.mark.slow
@pytest.mark.parametrize("distribution", LISTED)
def test_the_package_imports(imported: dict[str, str], distribution: str) -> None:
    module = MODULES[distribution]
    assert imported[module] == "ok", imported[module]
