"""A scripted OpenAI-compatible model for smoke tests and benchmarks (``gdpval fake-model``).

``script`` holds the pure conversation logic, ``server`` the HTTP front.
"""

from gdpval.fakemodel.script import DELIVERABLE_NAME, FAULT_KINDS, parse_inventory
from gdpval.fakemodel.server import FakeModelServer, serve, start_background

__all__ = [
    "DELIVERABLE_NAME",
    "FAULT_KINDS",
    "FakeModelServer",
    "parse_inventory",
    "serve",
    "start_background",
]
