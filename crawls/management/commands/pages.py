"""`archiver pages ID [--failed] [--json]`: the pages a crawl recorded, with their errors."""

from __future__ import annotations

from django.core.management.base import CommandError
from rich.table import Table
from rich.text import Text

from crawls.cli import ArchiverCommand, int_arg
from crawls.models import Crawl, SnapshotStatus

MAX_LIMIT = 1_000_000


class Command(ArchiverCommand):
    help = "List the pages of a crawl (oldest first), or only its failed pages with their errors."

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("--failed", action="store_true", help="only the pages that failed")
        parser.add_argument("--limit", type=int_arg, default=1000, metavar="N",
                            help="at most N pages (default 1000)")
        parser.add_argument("--json", action="store_true", help="print the pages as JSON")

    def run(self, *, id, failed, limit, json, **options):
        if not 1 <= limit <= MAX_LIMIT:
            raise CommandError(f"--limit {limit}: must be from 1 to {MAX_LIMIT}")
        crawl = Crawl.objects.by_prefix(id)
        pages = crawl.snapshots.order_by("id")
        if failed:
            pages = pages.filter(status=SnapshotStatus.FAILED)
        pages = list(pages[:limit])
        if json:
            self.write_json([page_summary(page) for page in pages])
        elif not pages:
            self.stdout.write(f"crawl {crawl.short_id}: no {'failed ' if failed else ''}pages")
        else:
            self.render(page_table(pages))


def page_summary(page) -> dict:
    return {
        "url": page.url, "status": page.status, "http_status": page.http_status,
        "depth": page.depth, "mime": page.mime or None, "title": page.title or None,
        "error": page.error or None,
        "captured_at": page.captured_at.isoformat().replace("+00:00", "Z") if page.captured_at else None,
    }


def page_table(pages) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("STATUS", "HTTP", "DEPTH", "URL", "ERROR"):
        table.add_column(column, no_wrap=column != "ERROR", overflow="fold")
    for page in pages:
        style = "red" if page.status == SnapshotStatus.FAILED else ""
        table.add_row(Text(page.status, style=style), str(page.http_status or "-"), str(page.depth),
                      page.url, page.error or "")
    return table
