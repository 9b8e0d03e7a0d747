"""Every crawl write goes through a model or QuerySet method (issue 22): no `.update(` on
Crawl rows outside crawls/models/ and the lease queue (crawls/lease.py), so the guards a
write needs (the state it may leave, the lease token, the event) are written once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ["archiver", "crawls", "runner"]
ALLOWED = ["crawls/models/", "crawls/lease.py",
           "crawls/migrations/"]  # historical models: they have none of today's methods
WRITES = {"update", "bulk_update"}


def chain(node: ast.expr) -> list[str]:
    """`Crawl.objects.filter(x).exclude(y)` -> ["Crawl", "objects", "filter", "exclude"]."""
    names = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            return [node.id, *reversed(names)]
        else:
            return []


def crawl_rows(names: list[str], tainted: set[str]) -> bool:
    """Whether a chain yields Crawl rows: `Crawl.objects...`, an org's `.crawls` manager, or
    a variable that holds such a queryset."""
    return bool(names) and (names[:2] == ["Crawl", "objects"] or names[0] in tainted
                            or "crawls" in names[1:])


def querysets_of_crawls(scope: ast.AST) -> set[str]:
    """Names a scope assigns a Crawl queryset to (`rows = Crawl.objects.filter(...)`)."""
    tainted: set[str] = set()
    while True:
        found = {target.id for node in ast.walk(scope) if isinstance(node, ast.Assign)
                 and crawl_rows(chain(node.value), tainted)
                 for target in node.targets if isinstance(target, ast.Name)}
        if found <= tainted:
            return tainted
        tainted |= found


def crawl_writes(source: str, name: str = "<source>") -> list[str]:
    tree = ast.parse(source, name)
    scopes = [tree, *(node for node in ast.walk(tree)
                      if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))]
    found = set()
    for scope in scopes:
        tainted = querysets_of_crawls(scope) if scope is not tree else set()
        for node in ast.walk(scope):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in WRITES and crawl_rows(chain(node.func.value), tainted)):
                found.add(f"{name}:{node.lineno}")
    return sorted(found)


def test_the_finder_sees_each_kind_of_crawl_write():
    source = '''
def f(crawl, org, now):
    Crawl.objects.filter(pk=crawl.pk).update(size_bytes=1)
    due = Crawl.objects.not_started().due(now)
    rows = due.exclude(waiting_reason="")
    rows.filter(started_at=None).update(status="waiting_capacity")
    org.crawls.filter(status="queued").update(retry_at=now)
    Snapshot.objects.filter(crawl=crawl).update(filename="")
    fields.update(a=1)
    crawl.record_kept_bytes(1, 2)
'''
    assert crawl_writes(source) == ["<source>:3", "<source>:6", "<source>:7"]


def test_crawl_rows_are_written_only_through_model_methods():
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if not any(name.startswith(allowed) for allowed in ALLOWED):
                found += crawl_writes(path.read_text(), name)
    assert found == [], "write Crawl rows through a Crawl or CrawlQuerySet method"
