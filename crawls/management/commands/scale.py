"""`archiver scale ID N`: run N crawler instances for a crawl (1 to 8)."""

from __future__ import annotations

from crawls import wake
from crawls.cli import ArchiverCommand, find_crawl, int_arg
from crawls.lease import db_now


class Command(ArchiverCommand):
    help = "Set how many crawler instances an active crawl runs (1 to 8); the runner adjusts."

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("scale", type=int_arg, metavar="N", help="instances, 1 to 8")

    def run(self, *, id, scale, **options):
        crawl = find_crawl(id)
        before = crawl.scale
        crawl.set_scale(scale, db_now())
        wake.nudge()
        self.stdout.write(f"crawl {crawl.short_id}: scale {before} → {scale}")
