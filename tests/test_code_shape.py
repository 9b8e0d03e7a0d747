"""The runner's shape rule (issue: the runner rebuilt as small steps): no class in
`runner/` over 300 lines, no function over 60. A rule written down only in a doc drifts."""

from __future__ import annotations

import ast
from pathlib import Path

RUNNER = Path(__file__).resolve().parent.parent / "runner"
MAX_CLASS, MAX_FUNCTION = 300, 60


def oversized() -> list[str]:
    found = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            limit = (MAX_CLASS if isinstance(node, ast.ClassDef) else
                     MAX_FUNCTION if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None)
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                found.append(f"{path.relative_to(RUNNER.parent)}:{node.lineno} {node.name} "
                             f"({node.end_lineno - node.lineno + 1} lines, limit {limit})")
    return found


def test_no_runner_class_over_300_lines_and_no_function_over_60():
    assert oversized() == []
