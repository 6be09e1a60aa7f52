"""The renderer under hostile files: each is refused or stopped within its limits and recorded as
unrenderable, and the judge's own process never parses or inflates it.

Runs whichever renderer this machine has (the full runtime's sandbox, else the limited host child);
tests/images/test_render_full.py runs the same files through the full runtime on purpose.
"""

from __future__ import annotations

import resource

import pytest

from gdpval.render import view_file
from gdpval.render.child import RenderLimits
from support import hostile

MIB = 1 << 20


def own_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    ("name", "build", "reason"),
    [
        ("bomb.docx", hostile.zip_bomb_docx, "zip bomb"),
        ("laughs.xlsx", hostile.billion_laughs_xlsx, "DOCTYPE or entities"),
        ("macros.xlsm", hostile.macro_xlsm, "macros"),
        ("huge.png", lambda path: hostile.png(path, 60_000, 60_000, rows=2), "decompression bomb"),
    ],
)
def test_a_hostile_file_is_recorded_as_unrenderable(tmp_path, name, build, reason):
    path = build(tmp_path / name)
    assert path.stat().st_size < 256 * 1024  # small on disk
    before = own_peak_mib()
    view = view_file(path, name, cache_base=tmp_path / "cache")
    assert reason in view.unrenderable and not view.images
    assert view.text.startswith("[the file could not be rendered:") and view.summary.endswith(view.unrenderable)
    assert own_peak_mib() - before < 50  # nothing was inflated or decoded in the judge's process
    assert view_file(path, name, cache_base=tmp_path / "cache").unrenderable == view.unrenderable  # cached as such


def test_a_file_that_needs_more_memory_than_allowed_is_stopped_by_the_limit(tmp_path):
    path = hostile.png(tmp_path / "big.png", 6_000, 6_000)  # 36 Mpx: within the pixel budget, ~100 MiB decoded
    limits = RenderLimits(memory_bytes=160 * MIB)
    view = view_file(path, "big.png", limits=limits, cache_base=tmp_path / "cache")
    assert "memory" in view.unrenderable and not view.images
    roomy = view_file(path, "big.png", cache_base=tmp_path / "cache")
    assert not roomy.unrenderable and len(roomy.images) == 1  # the same file renders under the default limits
