"""manifest.jsonl round-trips prompts with every line-breaking character Python knows."""

from __future__ import annotations

import pytest

from gdpval.manifest import dump_manifest, load_manifest
from support import runs

# str.splitlines() breaks at all of these; JSON leaves the non-ASCII ones unescaped with ensure_ascii=False.
SEPARATORS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s[-1]):04X}" for s in SEPARATORS])
def test_prompts_with_line_separators_round_trip(sep):
    items = runs.entries([runs.task("t1", prompt=f"Dear team,{sep}please review{sep}"), runs.task("t2")])
    text = dump_manifest(items)
    assert text.count("\n") == 2
    assert load_manifest(text) == items
