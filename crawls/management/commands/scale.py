"""`archiver scale ID N`: run N crawler instances for a crawl (1 to 8)."""

from __future__ import annotations

from crawls import actions
from crawls.cli import ArchiverCommand, find_crawl, int_arg


class Command(ArchiverCommand):
    help = "Set how many crawler instances an active crawl runs (1 to 8); the runner adjusts."

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("scale", type=int_arg, metavar="N", help="instances, 1 to 8")

    def run(self, *, id, scale, **options):
        self.stdout.write(actions.scale(find_crawl(id), scale).message)
