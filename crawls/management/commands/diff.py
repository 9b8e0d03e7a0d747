"""`archiver diff A B [--json] [--all]`: pages added, removed, changed and unchanged from A to B."""

from __future__ import annotations

from rich.table import Table

from crawls import diffing
from crawls.cli import ArchiverCommand, find_crawl


class Command(ArchiverCommand):
    help = ("What changed from crawl A to crawl B (two ended crawls of one org): pages added, "
            "removed, changed (payload digest; text similarity for HTML) and unchanged.")

    def add_arguments(self, parser):
        parser.add_argument("a", metavar="A", help="the earlier crawl's id (a unique prefix will do)")
        parser.add_argument("b", metavar="B", help="the later crawl's id")
        parser.add_argument("--json", action="store_true", help="machine-readable, every page")
        parser.add_argument("--all", action="store_true", help="list the unchanged pages too")

    def run(self, *, a, b, json, all, **options):
        first, second = find_crawl(a), find_crawl(b)
        result = diffing.compare(first, second)
        if json:
            self.write_json(result.summary())
            return
        counts = Table(box=None, header_style="bold", pad_edge=False,
                       title=f"crawl {first.short_id} → {second.short_id}", title_justify="left")
        for column in ("ADDED", "REMOVED", "CHANGED", "UNCHANGED"):
            counts.add_column(column, justify="right")
        counts.add_row(*(str(n) for n in result.counts.values()))
        pages = Table(box=None, header_style="bold", pad_edge=False)
        pages.add_column("", no_wrap=True)
        pages.add_column("URL", overflow="fold")
        pages.add_column("SIMILARITY", justify="right")
        for url in result.added:
            pages.add_row("+", url, "")
        for url in result.removed:
            pages.add_row("-", url, "")
        for change in result.changed:
            pages.add_row("~", change.url, diffing.shown_score(change.similarity))
        for url in result.unchanged if all else ():
            pages.add_row("=", url, "1.00")
        self.render(counts, pages)
