"""`archiver delete ID`: delete a finished crawl with its files (active crawls are refused)."""

from __future__ import annotations

from crawls import actions
from crawls.cli import ArchiverCommand
from crawls.models import Crawl


class Command(ArchiverCommand):
    help = "Delete a finished crawl, its archive files and its records. Active crawls are refused."

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")

    def run(self, *, id, **options):
        crawl = Crawl.objects.select_related("org").by_prefix(id)
        self.stdout.write(actions.delete(crawl).message)
