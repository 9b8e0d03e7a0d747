"""The shape rule (issue: the runner rebuilt as small steps, then issue 22): no class over
300 lines and no function over 60 in the folders below. A rule written down only in a doc
drifts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One folder a line, so that adding one is a one-line change.
FOLDERS = (
    "runner",
    "crawler/archiver_crawler",
)
MAX_CLASS, MAX_FUNCTION = 300, 60


def oversized(folder: str) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            limit = (MAX_CLASS if isinstance(node, ast.ClassDef) else
                     MAX_FUNCTION if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None)
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                             f"({node.end_lineno - node.lineno + 1} lines, limit {limit})")
    return found


def test_every_folder_checked_exists():
    assert [f for f in FOLDERS if not (ROOT / f).is_dir()] == []


def test_no_class_over_300_lines_and_no_function_over_60():
    assert [line for folder in FOLDERS for line in oversized(folder)] == []
