"""The full-torch flavour (images/sandbox/README.md, "Flavours"): the paper's torch family
(requirements-torch.in) imports in that image under podman and in a local runtime unpacked from it
(but for the two that cannot beside the list, as in the paper's own environment: KNOWN_BROKEN), and
torch and Keras 3 on its torch backend compute.

Marked `torch`: `make test-torch` runs it, building the flavour first (from an empty cache about 3 GB
of wheels more than `full`); `make test` leaves it out."""

from __future__ import annotations

import subprocess

import pytest

from gdpval.sandbox import runtime
from infra.paths import cache_dir
from support.cli import gdpval
from support.paper_packages import IMPORT_SCRIPT, KNOWN_BROKEN, MODULES, TORCH_REQUIREMENTS_IN, listed, parse_imports
from support.sandbox_full import BUILD, python_in_local_runtime, python_in_podman

pytestmark = [pytest.mark.torch, pytest.mark.slow]

LISTED = listed(TORCH_REQUIREMENTS_IN.read_text())
TIMEOUT_S = 900
COMPUTE = r"""
import numpy, torch, keras
assert keras.backend.backend() == "torch", keras.backend.backend()
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
assert float((x @ x.T).trace()) == 55.0
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
assert model.predict(numpy.ones((4, 3)), verbose=0).shape == (4, 2)
print("COMPUTED", torch.__version__, keras.__version__)
"""


@pytest.fixture(scope="module")
def torch_image() -> str:
    """This tree's full-torch image, built if needed (its wheels are cached once downloaded)."""
    done = subprocess.run(["bash", str(BUILD), "build", "full-torch"], capture_output=True, text=True, timeout=5400)
    assert done.returncode == 0, f"images/sandbox/build.sh build full-torch failed: {done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def torch_runtime(torch_image) -> runtime.Runtime:
    """The flavour unpacked as a local runtime in a folder of its own, so the full runtime stays `current`."""
    base = cache_dir() / "runtimes-torch"
    done = gdpval("runtime", "build", "--image", torch_image, env={runtime.RUNTIMES_ENV: str(base)}, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    found = runtime.current(base)
    assert found is not None and found.info is not None and found.info.image == torch_image
    return found


@pytest.mark.parametrize("where", ["podman", "local"])
def test_the_torch_family_imports_and_computes(torch_image, torch_runtime, tmp_path, where: str) -> None:
    modules = sorted({MODULES[name] for name in LISTED})
    if where == "podman":
        imports = python_in_podman(IMPORT_SCRIPT, modules, TIMEOUT_S, ref=torch_image)
        computed = python_in_podman(COMPUTE, [], TIMEOUT_S, ref=torch_image)
    else:
        imports = python_in_local_runtime(IMPORT_SCRIPT, modules, tmp_path / "imports", TIMEOUT_S, system=torch_runtime)
        computed = python_in_local_runtime(COMPUTE, [], tmp_path / "compute", TIMEOUT_S, system=torch_runtime)
    results = parse_imports(imports)
    assert sorted(results) == modules
    failed = {module: error for module, error in results.items() if error != "ok"}
    assert sorted(failed) == sorted(KNOWN_BROKEN), failed
    for module, why in KNOWN_BROKEN.items():
        assert why in failed[module], failed[module]
    assert "COMPUTED 2.5.1" in computed, computed[-2000:]
