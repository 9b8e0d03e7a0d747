"""No import circle among archiver/, crawls/, runner/ and the crawler (issue 22): a module
that imports one that imports it back, however far round, is a tangle that every change
must keep in its head. Imports inside functions count: they only hide the circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"archiver": ROOT / "archiver", "crawls": ROOT / "crawls", "runner": ROOT / "runner",
            "archiver_crawler": ROOT / "crawler" / "archiver_crawler"}


def modules() -> dict[str, Path]:
    found = {}
    for folder in PACKAGES.values():
        for path in folder.rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(folder.parent).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every dotted name an import statement may load, relative ones made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in imported(node, name, path.name == "__init__.py"):
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    graph = import_graph()
    assert len(graph) > 100
    assert "runner.decide" in graph["runner.steps.supervise"]
    assert any(target.startswith("archiver_crawler.") for target in graph["archiver_crawler.cli"])


def test_no_import_circle_among_the_projects_packages():
    assert circles(import_graph()) == []


def test_a_circle_is_found_however_far_round():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
