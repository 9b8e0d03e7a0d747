"""`archiver doctor`: where each setting comes from (the environment, the data dir's
archiver.env, a default), then one line per part of the set-up (database, Redis, Docker
engine, crawler image, disk, data dir), each failure with its fix. Exit 0 when every check
passes, else 1.

It lives in runner/ because it asks what the runner uses (Redis, the engine); Django's own
`check` is a different command (system checks of the project).
"""

from __future__ import annotations

import io
import os
import sys

from django.core.management.base import CommandError
from rich.console import Console
from rich.text import Text

from archiver import conf
from archiver.errors import ConfigError
from archiver.options.kept import described
from crawls.cli import ArchiverCommand
from runner.doctor import Finding, run_checks

MARKS = {"ok": ("✓", "green"), "fail": ("✗", "bold red"), "skip": ("–", "dim")}


class Command(ArchiverCommand):
    help = ("Check that this set-up can crawl: database, Redis, Docker engine, crawler image, "
            "disk space, data dir. Prints a fix for each failure; exits 1 if any check fails. "
            "First says where each setting comes from: the environment, the data dir's archiver.env, a default.")
    # It must run where start-up checks fail (an unwritable data dir): it reports them itself.
    requires_system_checks = []

    def handle(self, *args, **options):
        self.colors = not options.get("no_color") and "NO_COLOR" not in os.environ
        try:
            settings, seen = conf.get(), conf.environment()
            findings = run_checks(settings)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("\n".join(described(seen)) + "\n\n")
        self.print_lines([line(finding) for finding in findings])
        failed = sum(finding.failed for finding in findings)
        if failed:
            self.stdout.write(f"{failed} of {len(findings)} checks failed.")
            sys.exit(1)
        self.stdout.write(f"All {len(findings)} checks passed.")

    def print_lines(self, lines: list[Text]) -> None:
        """Each line whole, never wrapped at the terminal's width: one finding, one line."""
        tty = self.stdout.isatty()
        console = Console(file=io.StringIO(), force_terminal=tty, highlight=False,
                          color_system="auto" if tty and self.colors else None)
        for text in lines:
            console.print(text, soft_wrap=True)
        self.stdout.write(console.file.getvalue(), ending="")


def line(finding: Finding) -> Text:
    """`✓ name: what was found`, or `✗ name: what is wrong — fix: what to do`, on one line."""
    mark, style = MARKS[finding.status]
    text = Text.assemble((mark, style), " ", (finding.name, "bold"), ": ", finding.text)
    if finding.fix:
        text.append(" — fix: ", style="bold")
        text.append(finding.fix)
    return text
