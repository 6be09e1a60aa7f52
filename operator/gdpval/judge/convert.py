"""Deliverable files as the judge model reads them: the render package's views (gdpval.render).

Kept as the judge's entry point; the rendering itself (limits, sandbox, cache) lives in gdpval.render.
"""

from __future__ import annotations

from gdpval.render import view_file
from gdpval.render.view import IMAGE_SIDE, IMAGES_PER_FILE, TEXT_PER_FILE, Facts, View, bounded

__all__ = ["IMAGE_SIDE", "IMAGES_PER_FILE", "TEXT_PER_FILE", "Facts", "View", "bounded", "view_file"]
