"""`archiver exclude ID REGEX [--remove]`: stop (or start again) crawling matching URLs."""

from __future__ import annotations

from crawls import actions
from crawls.cli import ArchiverCommand, find_crawl


class Command(ArchiverCommand):
    help = ("Exclude URLs matching a regex from an active crawl: kept in its configuration "
            "and sent to its running instances.")

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("regex", metavar="REGEX", help="a Python/JavaScript regular expression")
        parser.add_argument("--remove", action="store_true", help="remove this exclusion instead")

    def run(self, *, id, regex, remove, **options):
        crawl = find_crawl(id)
        change = actions.remove_exclusion if remove else actions.add_exclusion
        self.stdout.write(change(crawl, regex).message)
