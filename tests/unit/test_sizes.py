"""No file of the package over 600 lines and no function over 60, unless a one-line reason stands beside it.

A file's reason is a `# long: why` comment before its first import; a function's, the line just above
its `def` (or its first decorator). Lines are counted from the `def` or first decorator to the last line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "operator"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
REASON = "# long:"


def _reasoned(line: str) -> bool:
    return line.strip().startswith(REASON) and len(line.strip()) > len(REASON) + 3


def oversized(name: str, source: str) -> list[str]:
    """The file and the functions of `source` over their limit with no reason beside them."""
    lines = source.splitlines()
    tree = ast.parse(source)
    found = []
    first_import = min((n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))), default=len(lines) + 1)
    if len(lines) > MAX_FILE_LINES and not any(_reasoned(line) for line in lines[: first_import - 1]):
        found.append(f"{name}: {len(lines)} lines")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = (node.end_lineno or start) - start + 1
            if length > MAX_FUNCTION_LINES and not (start > 1 and _reasoned(lines[start - 2])):
                found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_file_or_function_is_over_its_limit_without_a_reason():
    found = [v for path in sorted(ROOT.rglob("*.py")) for v in oversized(str(path.relative_to(ROOT)), path.read_text())]
    assert found == [], "split these, or give the reason on the line above (`# long: why`):\n" + "\n".join(found)


def test_the_size_rule_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_function = f"import os\n\n\ndef f():\n{body}\n"
    assert oversized("m.py", long_function) == [f"m.py:4 f: {MAX_FUNCTION_LINES + 1} lines"]
    assert oversized("m.py", long_function.replace("def f", "# long: a table the tests read whole\ndef f")) == []
    long_file = "import os\n" + "x = 1\n" * MAX_FILE_LINES
    assert oversized("m.py", long_file) == [f"m.py: {MAX_FILE_LINES + 1} lines"]
    assert oversized("m.py", "# long: generated from the schema\n" + long_file) == []
    assert oversized("m.py", "# long:\n" + long_file) == [f"m.py: {MAX_FILE_LINES + 2} lines"], "an empty reason is no reason"
