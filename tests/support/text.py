"""Text from all Unicode categories plus the characters that broke or could break a line-, byte- or
JSON-based format (tests/unit/test_text_roundtrip.py says which and why), as hypothesis strategies."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROFILE = settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r", "\r\n", "\n", "\t"]
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"]
ODD = [
    "\x00",
    "\x7f",
    "\ufeff",
    "\u200b",
    "\u200d",
    "\ufffe",
    "\uffff",
    "\ufffd",
    "\U0001f600",
    "\U0001d518",
    "\U000e0001",
    "\U0010ffff",
    "\\",
    '"',
    "\\u2028",
    "{}",
    "'",
]
LONE = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]
EVERY_LISTED = "".join(SEPARATORS + BIDI + ODD)

_CHARACTERS = st.characters(exclude_categories=["Cs"])  # every category but lone surrogates
_PIECES = st.one_of(st.text(_CHARACTERS, max_size=6), st.sampled_from(SEPARATORS + BIDI + ODD))
TEXT = st.lists(_PIECES, max_size=10).map("".join)
NAME = TEXT.filter(lambda s: 0 < len(s) <= 256)
WITH_LONE = st.lists(st.one_of(_PIECES, st.integers(0xD800, 0xDFFF).map(chr)), max_size=10).map("".join)
