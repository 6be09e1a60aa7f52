"""The package's import graph: no circles, and no import that runs back up the layers.

Read from the source with `ast` (module-level and function-level imports alike), so a lazy import
inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "operator"

# Bottom to top: a module may import its own package and any package of a lower layer.
LAYERS = (
    ("gdpval", "gdpval.errors", "gdpval.settings", "gdpval.contract"),
    ("gdpval.sample", "gdpval.storage"),
    ("gdpval.api",),
    ("gdpval.dataset", "gdpval.budget"),
    ("gdpval.manifest",),
    ("gdpval.records",),
    ("gdpval.sandbox", "gdpval.submission"),
    ("gdpval.agent", "gdpval.render"),
    ("gdpval.runner", "gdpval.judge"),
    ("gdpval.controller", "gdpval.fakemodel"),
    ("gdpval.report",),
    ("gdpval.cli",),
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names}
    return {name for name in found if name in MODULES}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _layer(module: str) -> tuple[int, str]:
    """(layer index, owning package): the longest package prefix wins."""
    matches = [(len(pkg), i, pkg) for i, pkgs in enumerate(LAYERS) for pkg in pkgs if module == pkg or module.startswith(pkg + ".")]
    assert matches, f"{module} belongs to no layer: add its package to LAYERS"
    _, index, package = max(matches)
    return index, package


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for module in GRAPH:
        if module not in index:
            visit(module)
    return found


def test_no_import_circles():
    assert _cycles() == []


def test_no_import_runs_up_the_layers():
    upward = []
    for module, imported in sorted(GRAPH.items()):
        level, package = _layer(module)
        for name in sorted(imported):
            their_level, their_package = _layer(name)
            if their_package != package and their_package != "gdpval" and their_level >= level:
                upward.append(f"{module} -> {name}")
    assert upward == []


# Inside the controller: the pure part (its types, names, manifests, ledger, views, decision, policies,
# status, queue) never reaches the effects; and the adapters to the outside
# (the Kubernetes API, S3, metrics, the Lease) never reach the decision, not even through another module.
PURE = ("gdpval.controller.types", "gdpval.controller.pure")
EFFECTS = "gdpval.controller.effects"
DECISION = "gdpval.controller.pure.decide"
ADAPTERS = tuple(f"{EFFECTS}.{name}" for name in ("kube", "s3", "metrics", "leader", "fanout", "resolve", "memory"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for name in graph.get(todo.pop(), set()) - seen:
            seen.add(name)
            todo.append(name)
    return seen


def controller_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        if any(_within(module, p) for p in PURE):
            found += [f"{module} -> {name} (pure imports an effect)" for name in sorted(imported) if _within(name, EFFECTS)]
    for adapter in ADAPTERS:
        found += [f"{adapter} reaches {name} (an adapter depends on the decision)" for name in sorted(_reach(graph, adapter)) if _within(name, DECISION)]
    return found


def test_the_controller_imports_nothing_of_the_agent():
    """The operator decides with the run's settings and the budget's arithmetic (gdpval.budget), never with the agent's loop."""
    assert controller_agent_imports(GRAPH) == []


def test_the_controller_agent_rule_can_fail():
    bad = {**GRAPH, f"{DECISION}.samples": GRAPH[f"{DECISION}.samples"] | {"gdpval.agent.governor"}}
    assert controller_agent_imports(bad) == [f"{DECISION}.samples -> gdpval.agent.governor"]


def controller_agent_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{m} -> {name}"
        for m, imported in sorted(graph.items())
        if _within(m, "gdpval.controller")
        for name in sorted(imported)
        if _within(name, "gdpval.agent")
    ]


def test_the_controller_keeps_pure_and_effects_apart():
    assert all(adapter in GRAPH for adapter in ADAPTERS), "an adapter was renamed: update ADAPTERS"
    assert controller_violations(GRAPH) == []


def test_the_controller_check_can_fail():
    """An adapter importing the decision, directly or through a pure module, and a pure module importing an effect, are all caught."""
    direct = {**GRAPH, f"{EFFECTS}.kube": GRAPH[f"{EFFECTS}.kube"] | {DECISION}}
    assert f"{EFFECTS}.kube reaches {DECISION} (an adapter depends on the decision)" in controller_violations(direct)
    through = {**GRAPH, "gdpval.controller.pure.queue": GRAPH["gdpval.controller.pure.queue"] | {f"{DECISION}.samples"}}
    assert any(v.startswith(f"{EFFECTS}.kube reaches {DECISION}") for v in controller_violations(through))
    upward = {**GRAPH, "gdpval.controller.types": GRAPH["gdpval.controller.types"] | {f"{EFFECTS}.kube"}}
    assert "gdpval.controller.types -> gdpval.controller.effects.kube (pure imports an effect)" in controller_violations(upward)


def test_the_checks_can_fail():
    """The graph is read for real: known edges are present, and a made-up upward edge is caught."""
    assert "gdpval.settings" in GRAPH["gdpval.api.v1alpha1"]
    assert _layer("gdpval.storage.layout") < _layer("gdpval.controller.effects.operator")
    assert GRAPH["gdpval.settings"] == set(), "settings is the bottom layer: it imports nothing of the package"


# A run's records: only gdpval.records names run.json's key, so "never prepared" and "unreadable" are
# decided in one place and every reader of run.json goes through it.
RECORDS = "gdpval.records"
RUN_JSON_NAMES = {"run_json", "RUN_JSON"}


def run_json_readers(sources: dict[str, str]) -> list[str]:
    """Modules other than the records module (and the layout that builds the key) that use run.json's key."""
    found = []
    for module, source in sorted(sources.items()):
        if module in (RECORDS, "gdpval.storage.layout"):
            continue
        names = {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}
        names |= {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) for a in n.names}
        found += [f"{module} uses layout.{name}" for name in sorted(names & RUN_JSON_NAMES)]
    return found


SOURCES = {name: path.read_text() for name, path in MODULES.items()}


def test_only_the_records_module_reads_run_json():
    assert RECORDS in MODULES
    assert run_json_readers(SOURCES) == []


def test_the_run_json_rule_can_fail():
    """A module that reads run.json itself, by the layout's function or by importing the file name, is caught."""
    reads = {**SOURCES, "gdpval.judge.run": SOURCES["gdpval.judge.run"] + "\nx = layout.run_json('r')\n"}
    assert run_json_readers(reads) == ["gdpval.judge.run uses layout.run_json"]
    named = {**SOURCES, "gdpval.report.records": "from gdpval.storage.layout import RUN_JSON\n"}
    assert run_json_readers(named) == ["gdpval.report.records uses layout.RUN_JSON"]


# Rooms with rules of their own: the controller's pure part is the controller's (the API is gdpval.api);
# the tool server is copied alone into images, so it imports nothing of the package; the controller's
# shared types sit near its bottom; the two judges share gdpval.judge.request, never each other.
TOOLSERVER = "gdpval.sandbox.toolserver"
TYPES = "gdpval.controller.types"
TYPES_MAY_REACH = {f"gdpval.controller.pure.{name}" for name in ("ledger", "observe", "workload", "names")}
JUDGES = ("gdpval.judge.run", "gdpval.judge.pairwise")


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    found = [
        f"{m} -> {name} (only the controller imports controller.pure)"
        for m, imported in sorted(graph.items())
        if not _within(m, "gdpval.controller")
        for name in sorted(imported)
        if _within(name, "gdpval.controller.pure")
    ]
    found += [f"{TOOLSERVER} -> {name} (the tool server runs alone)" for name in sorted(graph[TOOLSERVER])]
    reach = {name for name in _reach(graph, TYPES) if _within(name, "gdpval.controller")}
    found += [f"{TYPES} reaches {name} (types sit low)" for name in sorted(reach - TYPES_MAY_REACH)]
    found += [f"{a} -> {b} (judges share gdpval.judge.request)" for a in JUDGES for b in JUDGES if b in graph[a]]
    return found


def test_the_rooms_keep_their_rules():
    assert {TOOLSERVER, TYPES, *JUDGES, *TYPES_MAY_REACH} <= set(GRAPH), "a module was renamed: update the room rules"
    assert room_violations(GRAPH) == []


def test_the_room_rules_can_fail():
    def adding(module: str, name: str) -> list[str]:
        return room_violations({**GRAPH, module: GRAPH[module] | {name}})

    assert adding("gdpval.report.cli", "gdpval.controller.pure.names") == [
        "gdpval.report.cli -> gdpval.controller.pure.names (only the controller imports controller.pure)"
    ]
    assert adding(TOOLSERVER, "gdpval.contract") == [f"{TOOLSERVER} -> gdpval.contract (the tool server runs alone)"]
    assert f"{TYPES} reaches gdpval.controller.pure.manifests (types sit low)" in adding("gdpval.controller.pure.observe", "gdpval.controller.pure.manifests")
    assert adding("gdpval.judge.pairwise", "gdpval.judge.run") == ["gdpval.judge.pairwise -> gdpval.judge.run (judges share gdpval.judge.request)"]
