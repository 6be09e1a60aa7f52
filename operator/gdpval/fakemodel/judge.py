"""The scripted model's judge mode: a judge request in, scores derived from the request out.

Each rubric item scores a whole number from 0 to its points, picked by a hash of the request and the
item id, so the same request always gets the same scores and a test can compute them. Faults:
`malformed` cuts the JSON reply in half; `500` and `429` answer as the server's other modes do.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

JUDGE_FAULTS = ("429", "500", "malformed")


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
