"""`archiver run [--daemon|--once]`: the runner that launches and supervises crawls."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from archiver import conf
from archiver.errors import ConfigError
from runner.outage import short_busy_waits
from runner.service import build_runner


class Command(BaseCommand):
    help = ("Run queued crawls. Without options: until nothing is due or running, then exit. "
            "--daemon: until SIGTERM/SIGINT (crawlers keep running; a restart adopts them).")
    requires_system_checks = ["archiver"]  # as every archiver command (crawls/cli.py)

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--daemon", action="store_true", help="run until signalled")
        mode.add_argument("--once", action="store_true", help="run one tick and exit")
        parser.add_argument("--interrupt-crawls", action="store_true",
                            help="on SIGTERM/SIGINT, pause the running crawls before exiting")
        parser.add_argument("--no-live", action="store_true",
                            help="log lines even on a terminal, no live table")

    def handle(self, *args, daemon, once, interrupt_crawls, no_live, **options):
        mode = "daemon" if daemon else "once" if once else "drain"
        if interrupt_crawls and not daemon:
            raise CommandError("--interrupt-crawls only makes sense with --daemon")
        try:
            service = build_runner(conf.get())
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        service.runner.interrupt_crawls = interrupt_crawls
        short_busy_waits()
        live = sys.stdout.isatty() and not no_live and mode != "once"
        try:
            service.run(mode, live=live)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
