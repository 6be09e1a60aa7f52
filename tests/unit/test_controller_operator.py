"""The kopf wiring: the settings `configure` uses exist in every kopf the package allows."""

from __future__ import annotations

import tomllib

import kopf
from packaging.requirements import Requirement
from packaging.version import Version

from gdpval.controller import names as n
from gdpval.controller.operator import configure
from infra.paths import REPO_ROOT

# `settings.watching.label_selectors` first appears in kopf 1.45.0: the 1.44.6 tag of nolar/kopf has no
# such attribute, the 1.45.0 wheel has it (both read, not guessed).
KOPF_WITH_LABEL_SELECTORS = Version("1.45.0")


def _kopf_requirement() -> Requirement:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return next(r for r in map(Requirement, project["dependencies"]) if r.name == "kopf")


def test_kopf_floor_has_the_server_side_label_selectors():
    floors = [Version(s.version) for s in _kopf_requirement().specifier if s.operator == ">="]
    assert floors and min(floors) >= KOPF_WITH_LABEL_SELECTORS, f"kopf {_kopf_requirement().specifier} allows versions without label_selectors"


def test_configure_selects_only_our_pods_and_jobs():
    settings = kopf.OperatorSettings()
    configure(settings)
    assert dict(settings.watching.label_selectors) and set(settings.watching.label_selectors.values()) == {n.MANAGED_SELECTOR}
    assert settings.networking.request_timeout
