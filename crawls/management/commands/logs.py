"""`archiver logs ID [--follow]`: a crawl's log lines (the runner's and its crawlers')."""

from __future__ import annotations

import threading

from django.core.management.base import CommandError

from crawls.cli import ArchiverCommand, int_arg
from crawls.models import Crawl, CrawlLog

FOLLOW_SECONDS = 1.0
MAX_LINES = 1_000_000


class Command(ArchiverCommand):
    help = "Print a crawl's log lines, oldest first; --follow keeps printing new ones until it ends."

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("--lines", type=int_arg, default=200, metavar="N",
                            help="the last N lines (default 200)")
        parser.add_argument("--follow", "-f", action="store_true",
                            help="keep printing new lines until the crawl ends (or Ctrl-C)")

    def run(self, *, id, lines, follow, **options):
        if not 1 <= lines <= MAX_LINES:
            raise CommandError(f"--lines {lines}: must be from 1 to {MAX_LINES}")
        crawl = Crawl.objects.by_prefix(id)
        last = self.print_lines(reversed(crawl.logs.order_by("-id")[:lines]), 0)
        stop = threading.Event()
        while follow and not stop.is_set():
            crawl.refresh_from_db(fields=["status"])
            final = crawl.is_final  # read before the lines, so the last ones are not missed
            last = self.print_lines(crawl.logs.filter(id__gt=last).order_by("id"), last)
            if final:
                return
            try:
                stop.wait(FOLLOW_SECONDS)
            except KeyboardInterrupt:
                return

    def print_lines(self, rows, last: int) -> int:
        for line in rows:
            self.stdout.write(format_line(line))
            last = max(last, line.id)
        return last


def format_line(line: CrawlLog) -> str:
    return f"{line.created_at:%Y-%m-%d %H:%M:%S} {line.level:<7} {line.source}: {line.message}"
