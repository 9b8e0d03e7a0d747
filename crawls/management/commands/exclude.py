"""`archiver exclude ID REGEX [--remove]`: stop (or start again) crawling matching URLs."""

from __future__ import annotations

from django.core.management.base import CommandError

from crawls import wake
from crawls.cli import ArchiverCommand, find_crawl
from crawls.config import MAX_REGEXES, check_regex, shown
from crawls.lease import db_now


class Command(ArchiverCommand):
    help = ("Exclude URLs matching a regex from an active crawl: kept in its configuration "
            "and sent to its running instances.")

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("regex", metavar="REGEX", help="a Python/JavaScript regular expression")
        parser.add_argument("--remove", action="store_true", help="remove this exclusion instead")

    def run(self, *, id, regex, remove, **options):
        check_regex(regex)
        crawl = find_crawl(id)
        if not remove and len(crawl.config.get("exclude", [])) >= MAX_REGEXES:
            raise CommandError(f"crawl {crawl.short_id} already has {MAX_REGEXES} exclusions")
        crawl.change_exclusion(regex, db_now(), remove=remove)
        wake.nudge()
        verb = "no longer excludes" if remove else "excludes"
        live = " (sent to its running instances)" if crawl.has_runtime else ""
        self.stdout.write(f"crawl {crawl.short_id} {verb} {shown(regex)}{live}")
