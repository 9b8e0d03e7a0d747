"""`archiver import FILE... [--org SLUG] [--json]`: archives made elsewhere (WARC, WARC.gz, WACZ,
multi-WACZ) taken in as one item of the org (runner/intake.py)."""

from __future__ import annotations

from pathlib import Path

from django.utils import timezone
from rich.table import Table

from archiver import conf
from crawls import provenance
from crawls.cli import ArchiverCommand
from crawls.config import human_size
from crawls.management.commands.add import find_org
from runner import intake


class Command(ArchiverCommand):
    help = ("Take in archives made elsewhere (WARC or WARC.gz from any producer, WACZ, a "
            "multi-WACZ) as one item of the org: its pages listed, searchable, replayable, "
            "deduplicated against. All files or none: a refused file leaves nothing behind.")

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE", type=Path)
        parser.add_argument("--org", default="default", metavar="SLUG")
        parser.add_argument("--json", action="store_true", help="machine-readable")

    def run(self, *, files, org, json, **options):
        imported = intake.import_archives(conf.get(), find_org(org), files, timezone.now())
        crawl = imported.crawl
        if json:
            self.write_json({"id": crawl.id, "pages": imported.pages, "files": [
                {"path": f.path, "size": f.size, "sha256": f.sha256, "signer": f.signer,
                 "verified": f.verify_ok, "provenance": provenance.said(f)}
                for f in imported.files]})
            return
        table = Table(box=None, header_style="bold", pad_edge=False,
                      title=f"imported as {crawl.short_id} ({crawl.id}): {imported.pages} page(s)",
                      title_justify="left")
        table.add_column("KEPT AS", overflow="fold")
        table.add_column("SIZE", justify="right")
        table.add_column("PROVENANCE", overflow="fold")
        for row in imported.files:
            table.add_row(row.path, human_size(row.size), provenance.said(row))
        self.render(table)
