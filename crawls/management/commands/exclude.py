"""`archiver exclude ID REGEX [--remove]`: stop (or start again) crawling matching URLs."""

from __future__ import annotations

from crawls import wake
from crawls.cli import ArchiverCommand
from crawls.lease import db_now
from crawls.models import Crawl


class Command(ArchiverCommand):
    help = ("Exclude URLs matching a regex from an active crawl: kept in its configuration "
            "and sent to its running instances.")

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("regex", metavar="REGEX", help="a Python/JavaScript regular expression")
        parser.add_argument("--remove", action="store_true", help="remove this exclusion instead")

    def run(self, *, id, regex, remove, **options):
        crawl = Crawl.objects.by_prefix(id)
        crawl.change_exclusion(regex, db_now(), remove=remove)
        wake.nudge()
        verb = "no longer excludes" if remove else "excludes"
        live = " (sent to its running instances)" if crawl.has_runtime else ""
        self.stdout.write(f"crawl {crawl.short_id} {verb} {regex!r}{live}")
