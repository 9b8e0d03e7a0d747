"""What archiver's management commands share: errors, parsing of user values, output.

Commands stay thin: they parse and validate here, call a model method, and print.
Every refusal becomes a CommandError, so the user sees one line on stderr and no
traceback; argparse's own errors are shortened to one line as well.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
from argparse import ArgumentTypeError

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.utils import OperationalError, ProgrammingError
from pydantic import ValidationError
from rich.console import Console

from archiver.conf import parse_duration
from archiver.errors import ArchiverError
from crawls.config import CrawlConfig, parse_size

# Where a CrawlConfig field comes from on the command line, to name it in errors.
OPTION_FOR_FIELD = {
    "depth": "--depth",
    "extra_hops": "--extra-hops",
    "page_limit": "--limit",
    "size_limit": "--size-limit",
    "time_limit": "--time-limit",
    "include": "--include",
    "exclude": "--exclude",
    "workers": "--workers",
    "scale": "--scale",
    "user_agent": "--user-agent",
    "scope_type": "--scope",
}


class OneLineParser(CommandParser):
    """Reports a usage error as one line (`prog: error: ...`) and exit status 2."""

    def error(self, message):
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message}\n")
        super().error(message)


class ArchiverCommand(BaseCommand):
    """A command whose refusals (ArchiverError, ValueError, an unusable database) reach the
    user as one line."""

    colors = True  # off with --no-color or NO_COLOR; never on when stdout is not a terminal

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django offers no hook for the parser class; OneLineParser adds no state, only
        # error(), and subparsers inherit it through type(self).
        parser.__class__ = OneLineParser
        return parser

    def handle(self, *args, **options):
        self.colors = not options.get("no_color") and "NO_COLOR" not in os.environ
        try:
            return self.run(*args, **options)
        except (ArchiverError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        except (OperationalError, ProgrammingError) as exc:
            # Most often a database that was never migrated, or one from a newer version.
            raise CommandError(f"database error: {exc} (has `archiver migrate` been run?)") from None

    def run(self, *args, **options):
        raise NotImplementedError

    def write_json(self, value) -> None:
        self.stdout.write(json.dumps(value, indent=2, sort_keys=True))

    def render(self, *renderables) -> None:
        """Print rich renderables through self.stdout (so call_command can capture them)."""
        tty = self.stdout.isatty()
        buffer = io.StringIO()
        console = Console(
            file=buffer, force_terminal=tty, highlight=False,
            color_system="auto" if tty and self.colors else None,
            width=shutil.get_terminal_size().columns if tty else 120,
        )
        for renderable in renderables:
            console.print(renderable)
        text = buffer.getvalue()
        if not tty:  # rich pads table cells; trailing blanks only get in the way of grep/diff
            text = "".join(line.rstrip() + "\n" for line in text.splitlines())
        self.stdout.write(text, ending="")


# --- argparse value types ----------------------------------------------------------------
# argparse shows an ArgumentTypeError's own message (a ValueError only as "invalid value").


def arg_type(parse):
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise ArgumentTypeError(str(exc)) from None

    return convert


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def optional_quota(parse, *, high: int):
    """`none` clears a quota (unlimited); anything else is `parse(text)`, from 1 to `high`."""

    def convert(text: str) -> int | None:
        if text.strip().lower() in ("none", "unlimited"):
            return None
        value = parse(text)
        if not 1 <= value <= high:
            raise ValueError(f"{text!r} is out of range (1 to {high}, or none)")
        return value

    return arg_type(convert)


size_arg = arg_type(parse_size)
duration_arg = arg_type(parse_duration)
int_arg = arg_type(whole_number)


# --- crawl configuration -------------------------------------------------------------------


def parse_crawl_config(values: dict) -> CrawlConfig:
    """Validate like CrawlConfig.parse, but name the command-line option that is wrong."""
    try:
        return CrawlConfig(**values)
    except ValidationError as exc:
        raise CommandError(config_error_line(exc)) from None


def config_error_line(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    message = error["msg"].removeprefix("Value error, ")
    if field == "seeds":
        return message
    option = OPTION_FOR_FIELD.get(field, field)
    if "input" in error and not isinstance(error["input"], list | dict):
        return f"{option} {error['input']!r}: {message}"
    return f"{option}: {message}"


# --- small formatting helpers used by status and org ---------------------------------------


def age(then: dt.datetime | None, now: dt.datetime) -> str:
    """A short age such as `45s`, `12m`, `3h`, `5d`."""
    if then is None:
        return "-"
    seconds = max((now - then).total_seconds(), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def duration(seconds: float | None) -> str:
    if not seconds:
        return "0s"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def progress_bar(done: int, found: int, width: int = 12) -> str:
    """`██████░░░░░░ 12/24`: pages done out of pages found."""
    filled = round(width * done / found) if found else 0
    filled = min(filled, width)
    return f"{'█' * filled}{'░' * (width - filled)} {done}/{found}"


class TransitionCommand(ArchiverCommand):
    """`archiver <action> ID`: ask a crawl for one transition, then wake the runner."""

    action: str  # the Crawl method to call: pause, resume, stop, cancel or retry

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("--json", action="store_true", help="print the crawl as JSON")

    def run(self, *, id, json, **options):
        from crawls import wake
        from crawls.lease import db_now
        from crawls.models import Crawl

        crawl = Crawl.objects.select_related("org").by_prefix(id)
        self.act(crawl, db_now(), options)
        wake.nudge()
        if json:
            self.write_json(crawl.summary())
        else:
            self.stdout.write(self.outcome(crawl))

    def act(self, crawl, now, options) -> None:
        getattr(crawl, self.action)(now)

    def outcome(self, crawl) -> str:
        """What happened, in words, judged from the crawl's state after the call."""
        raise NotImplementedError
