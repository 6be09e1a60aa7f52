"""The scripted model's judge mode: a judge request in, scores or a preference derived from the request out.

Each rubric item scores a whole number from 0 to its points, picked by a hash of the request and the
item id, so the same request always gets the same scores and a test can compute them. A pairwise
request gets the preference the server was started with (PREFERENCES). Faults: `malformed` cuts the
JSON reply in half; `500` and `429` answer as the server's other modes do.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

JUDGE_FAULTS = ("429", "500", "malformed")
# How a pairwise judge chooses: always set A; always set B; by a hash of each set's text (the same set
# wins in both orders); the set whose text contains TEXT (tie when both or neither do); the set lacking it.
PREFERENCES = ("first", "second", "content", "text:TEXT", "not-text:TEXT")


def check_preference(preference: str) -> str:
    if preference in ("first", "second", "content") or (preference.partition(":")[0] in ("text", "not-text") and preference.partition(":")[2]):
        return preference
    raise ValueError(f"judge preference {preference!r}: use one of {', '.join(PREFERENCES)}")


def pairwise_choice(preference: str, sets: dict[str, str]) -> str:
    """ "A", "B" or "tie" for the two sets' texts, as `preference` says."""
    if preference in ("first", "second"):
        return "A" if preference == "first" else "B"
    if preference == "content":
        a, b = (hashlib.sha256(sets[k].encode()).hexdigest() for k in ("A", "B"))
        return "tie" if a == b else ("A" if a > b else "B")
    kind, _, text = preference.partition(":")
    has = {k: (text in v) == (kind == "text") for k, v in sets.items()}
    return "tie" if has["A"] == has["B"] else ("A" if has["A"] else "B")


def pairwise_content(preference: str, sets: dict[str, str], malformed: bool = False) -> str:
    choice = pairwise_choice(preference, sets)
    content = json.dumps({"reason": f"scripted judge ({preference}): set {choice} is better" if choice != "tie" else "scripted judge: a tie", "better": choice})
    return content[: len(content) // 2] if malformed else content


def item_score(digest: str, item_id: str, points: float) -> int:
    draw = int(hashlib.sha256(f"{digest}|{item_id}".encode()).hexdigest()[:12], 16)
    return draw % (math.floor(points) + 1)


def reply_content(items: list[dict[str, Any]], digest: str, malformed: bool = False) -> str:
    """The JSON the judge asked for; cut in half when a malformed reply is wanted."""
    scores = []
    for item in items:
        item_id, points = str(item.get("item_id", "")), float(item.get("points") or 0)
        score = item_score(digest, item_id, points)
        scores.append({"item_id": item_id, "score": score, "reason": f"scripted judge: {score} of {points:g} points"})
    content = json.dumps({"scores": scores}, ensure_ascii=False)
    return content[: len(content) // 2] if malformed else content


def decide_fault(faults: dict[str, float], seed: int, digest: str) -> str | None:
    """At most one judge fault per request, a pure function of (seed, request)."""
    draw = int(hashlib.sha256(f"{seed}|judge|{digest}".encode()).hexdigest()[:13], 16) / 16**13
    threshold = 0.0
    for kind in JUDGE_FAULTS:
        threshold += faults.get(kind, 0.0)
        if draw < threshold:
            return kind
    return None
