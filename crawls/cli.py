"""What archiver's management commands share: errors, parsing of user values, output.

Commands stay thin: they parse and validate here, call crawls.actions (or a model
method, to read), and print.
Exit codes are the same for every command:

- 2: the command line cannot be parsed (argparse: an unknown option, a missing argument,
  a value that is not a number, size or duration). One line: `prog: error: ...`.
- 1: a refusal (CommandError): a value out of range, an invalid URL or regex, an unknown
  id, a transition the crawl's state does not allow, no database. One line on stderr.

So argparse types only read the syntax of a value; its range is checked by the command
(`check_range`) or by the pydantic models (crawls.config, crawls.validation), before
anything reaches the database.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import logging
import os
import re
import shutil
from argparse import ArgumentTypeError
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.db.utils import OperationalError, ProgrammingError
from pydantic import ValidationError
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from archiver import conf
from archiver.conf import duration_in_seconds
from archiver.errors import ArchiverError
from crawls.config import CrawlConfig, input_context, size_in_bytes
from crawls.rules import RANGE_TEXT, SHOWN, range_message, shown

MAX_ID = 2**63 - 1  # the largest primary key the databases store
CRAWL_ID_LENGTH = 32
MAX_MESSAGE = 500  # characters of an error line; what is cut is an echoed value
PIPE_WIDTH = 160  # columns of a table in a pipe or a file: no terminal says how many

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
    "dedup": "--dedup",
    "qa": "--qa",
    "sitemap": "--sitemap",
    "seed_file": "--seed-file",
    "sitemap_since": "--sitemap-since",
    "scope_type": "--scope",
    "browser": "--browser",
    "behaviors": "--behaviors",
    "page_load_timeout": "--page-load-timeout",
    "post_load_delay": "--post-load-delay",
    "wait_until": "--wait-until",
    "block_ads": "--block-ads",
    "screenshot": "--screenshot",
    "lang": "--lang",
    "profile": "--profile",
}


# Comma-separated on the command line; their messages quote the one item that is wrong.
CHOICE_LISTS = ("behaviors", "wait_until", "screenshot")


def one_line(message: str) -> str:
    """A message as one readable line: control characters escaped, long quotes shortened."""
    message = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)
    message = LONG_QUOTE.sub(lambda m: f"{m.group(1)}{m.group(2)}…{m.group(1)}", message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "…"


# A quote opens after a blank, a bracket or `=:,` (not a closing quote or an apostrophe), so
# the prose between two quoted values is never cut as if it were one (the cron error was).
LONG_QUOTE = re.compile(r"""(?<![^\s(\[=:,])(['"])([^'"]{""" + str(SHOWN) + r"""})[^'"]{10,}\1""")


class OneLineParser(CommandParser):
    """Reports a usage error as one line (`prog: error: ...`) and exit status 2."""

    def error(self, message):
        message = one_line(message)
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message}\n")
        super().error(message)


@contextlib.contextmanager
def quiet_logging(verbosity: int):
    """A command's log at WARNING unless `-v 2` or ARCHIVER_LOG_LEVEL asks for more: its
    output is what it prints, and INFO lines on stderr only got in the way (the daemon,
    `archiver run`, logs at ARCHIVER_LOG_LEVEL, INFO by default)."""
    root = logging.getLogger()
    before = root.level
    if verbosity < 2 and not conf.environment().get("ARCHIVER_LOG_LEVEL"):
        root.setLevel(max(before, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(before)


class ArchiverCommand(BaseCommand):
    """A command whose refusals (ArchiverError, ValueError, an unusable database) reach the
    user as one line."""

    colors = True  # off with --no-color or NO_COLOR; never on when stdout is not a terminal
    # archiver's own start-up checks only (crawls/checks.py): Django's would import every URL
    # route and admin class first, a second of CPU on each command (`archiver check` runs all).
    requires_system_checks = ["archiver"]

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django offers no hook for the parser class; OneLineParser adds no state, only
        # error(), and subparsers inherit it through type(self).
        parser.__class__ = OneLineParser
        return parser

    def handle(self, *args, **options):
        self.colors = not options.get("no_color") and "NO_COLOR" not in os.environ
        try:
            with quiet_logging(options.get("verbosity", 1)):
                require_database()
                return self.run(*args, **options)
        except CommandError as exc:
            raise CommandError(one_line(str(exc)), returncode=exc.returncode) from None
        except (ArchiverError, ValueError) as exc:
            raise CommandError(one_line(str(exc))) from None
        except (OperationalError, ProgrammingError) as exc:
            # Most often a database that was never migrated, or one from a newer version.
            raise CommandError(one_line(f"database error: {exc} (has `archiver migrate` been run?)")) from None

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
            width=shutil.get_terminal_size().columns if tty else PIPE_WIDTH,
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
    """Plain ASCII digits with an optional sign: not `1_000`, `٣` or `1e3` (int() takes those)."""
    if not WHOLE_NUMBER.fullmatch(text):
        raise ValueError(f"{shown(text)} is not a whole number")
    return int(text)


WHOLE_NUMBER = re.compile(r"\s*[+-]?[0-9]{1,40}\s*")


def optional_quota(parse):
    """`none` clears a quota (unlimited); anything else is `parse(text)` (range: OrgInput)."""

    def convert(text: str) -> int | None:
        if text.strip().lower() in ("none", "unlimited"):
            return None
        return parse(text)

    return arg_type(convert)


size_arg = arg_type(size_in_bytes)
duration_arg = arg_type(duration_in_seconds)
int_arg = arg_type(whole_number)


def check_range(label: str, value: int | None, low: int, high: int) -> None:
    """Refuse (exit 1) a number outside low..high before it reaches a query."""
    if value is not None and not low <= value <= high:
        raise CommandError(f"{label} {shown(value)}: must be from {low} to {high}")


# --- the database and crawl ids ------------------------------------------------------------


def sqlite_file(alias: str = "default") -> Path | None:
    """The database file of a SQLite connection; None for another engine or in memory."""
    db = connections[alias].settings_dict
    name = str(db["NAME"])
    if "sqlite" not in db["ENGINE"] or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def require_database() -> None:
    """Refuse to run on a SQLite database that does not exist, rather than create it.

    A command run in the wrong folder (the default data dir is ./data) would otherwise
    leave an empty database behind and report "no crawls". Only `migrate` creates one.
    """
    database = sqlite_file()
    if database is not None and not database.exists():
        raise CommandError(
            f"no archiver database in {conf.get().data_dir} ({database} does not exist): set "
            f"ARCHIVER_DATA_DIR to your data dir, or run `archiver migrate` to start one there"
        )


def check_crawl_id(text: str) -> str:
    """A crawl id or a prefix of one: 1 to 32 hexadecimal digits."""
    prefix = text.strip().lower()
    if not prefix or len(prefix) > CRAWL_ID_LENGTH or not all(c in "0123456789abcdef" for c in prefix):
        raise CommandError(
            f"{shown(text)} is not a crawl id (ids are {CRAWL_ID_LENGTH} hexadecimal digits; "
            f"any unique prefix will do)"
        )
    return prefix


def find_crawl(text: str, rows=None):
    """The crawl whose id starts with `text`; refused with one line otherwise."""
    from crawls.models import Crawl

    rows = Crawl.objects.all() if rows is None else rows
    return rows.by_prefix(check_crawl_id(text))


# --- crawl configuration -------------------------------------------------------------------


def parse_crawl_config(values: dict) -> CrawlConfig:
    """Validate like CrawlConfig.parse, but name the command-line option that is wrong."""
    try:
        return CrawlConfig.model_validate(values, context=input_context())
    except ValidationError as exc:
        raise CommandError(config_error_line(exc)) from None


def config_error_line(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    message = range_message(CrawlConfig, error) or error["msg"].removeprefix("Value error, ")
    if field == "seeds":
        return message
    option = OPTION_FOR_FIELD.get(field, field)
    if error["type"] == "browser_crawler":  # about the option, whatever its value
        return f"{option} {message}"
    if error["type"] == "browser_mode":
        return f"{'--browser' if error.get('input') else '--no-browser'}: {message}"
    value = error.get("input")
    echo = "input" in error and not isinstance(value, list | dict) and field not in RANGE_TEXT
    if echo and field not in CHOICE_LISTS and not (isinstance(value, str) and shown(value) in message):
        return f"{option} {shown(error['input'])}: {message}"
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


class FittedTable:
    """A table as wide as the console at most, whose every column is shown: the `flexible`
    ones (long free text) share what the others leave, cut with an ellipsis.

    rich's own fitting, once one cell is too long, shrinks every column alike, so that the
    narrow first columns (an id, a state) are the first to vanish.
    """

    GAP = 2  # rich's default padding: one blank each side of a column, none at the edges
    READABLE = 18  # cells a flexible column needs to say something ("https://docs.pytho")

    def __init__(self, headers: tuple[str, ...], flexible: set[str], second_line: tuple[str, ...] = ()):
        """`second_line`: flexible columns that go on a line of their own under each row
        when the console cannot give every flexible column READABLE cells."""
        self.headers = headers
        self.flexible = flexible
        self.second_line = second_line
        self.rows: list[tuple[str | Text, ...]] = []

    def add_row(self, *cells: str | Text) -> None:
        self.rows.append(cells)

    def natural_widths(self) -> dict[str, int]:
        columns = zip(self.headers, *self.rows, strict=True)
        return {column[0]: max(Text(cell).cell_len if isinstance(cell, str) else cell.cell_len
                               for cell in column) for column in columns}

    def widths(self, width: int) -> list[int]:
        """Each column's width in `width` cells: its own, or for a flexible one its share."""
        natural = self.natural_widths()
        fixed = sum(w for header, w in natural.items() if header not in self.flexible)
        room = width - fixed - self.GAP * (len(self.headers) - 1)
        shares = share_out(room, {header: natural[header] for header in self.flexible})
        return [shares.get(header, w) for header, w in natural.items()]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.second_line and self.too_narrow(width):
            yield from self.on_two_lines(width)
            return
        table = Table(box=None, header_style="bold", pad_edge=False)
        for header, column_width in zip(self.headers, self.widths(width), strict=True):
            table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=column_width)
        for row in self.rows:
            table.add_row(*row)
        yield table

    def too_narrow(self, width: int) -> bool:
        """A flexible column would get fewer than READABLE cells (or than its own width)."""
        natural, given = self.natural_widths(), dict(zip(self.headers, self.widths(width), strict=True))
        return any(given[header] < min(self.READABLE, natural[header]) for header in self.flexible)

    def on_two_lines(self, width: int) -> RenderResult:
        """Each row's `second_line` columns under it, indented, cut at the console's width."""
        top = [i for i, header in enumerate(self.headers) if header not in self.second_line]
        below = [self.headers.index(header) for header in self.second_line]
        first = FittedTable(tuple(self.headers[i] for i in top), self.flexible - set(self.second_line))
        first.rows = [tuple(row[i] for i in top) for row in self.rows]
        widths = first.widths(width)
        room = width - 2 - self.GAP * (len(below) - 1)
        yield cells_line(first.headers, widths, width, style="bold")
        yield cells_line(self.second_line, [len(header) for header in self.second_line], width,
                         style="bold", indent=2)
        for row in self.rows:
            yield cells_line([row[i] for i in top], widths, width)
            # Each row's own cells share its line: a seed beside an empty reason is shown whole.
            shares = share_out(room, {n: as_text(row[i]).cell_len for n, i in enumerate(below)})
            yield cells_line([row[i] for i in below], [shares[n] for n in range(len(below))], width, indent=2)


def as_text(cell: str | Text) -> Text:
    return cell.copy() if isinstance(cell, Text) else Text(cell)


def cells_line(cells, widths: list[int], width: int, style: str = "", indent: int = 0) -> Text:
    """One line of cells, each padded or cut with an ellipsis to its width."""
    shown = []
    for cell, cell_width in zip(cells, widths, strict=True):
        text = as_text(cell)
        text.truncate(cell_width, overflow="ellipsis", pad=True)
        shown.append(text)
    line = Text(" " * indent, no_wrap=True, overflow="ellipsis") + Text(" " * FittedTable.GAP).join(shown)
    line.truncate(width, overflow="ellipsis")
    if style:
        line.stylize(style)
    return line


def share_out(room: int, wants: dict[str, int]) -> dict[str, int]:
    """Split `room` cells among columns that want `wants` cells: each gets what it wants,
    or an equal share of what the narrower ones left if that is less; at least one cell."""
    given: dict[str, int] = {}
    for name in sorted(wants, key=wants.get):
        given[name] = max(min(wants[name], room // (len(wants) - len(given))), 1)
        room -= given[name]
    return given


class TransitionCommand(ArchiverCommand):
    """`archiver <action> ID`: one action of crawls.actions on a crawl, and what it did."""

    action: str  # the crawls.actions function: pause, resume, stop, cancel or retry

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("--json", action="store_true", help="print the crawl as JSON")

    def run(self, *, id, json, **options):
        from crawls.models import Crawl

        crawl = find_crawl(id, Crawl.objects.select_related("org"))
        done = self.act(crawl, options)
        if json:
            self.write_json(crawl.summary())
        else:
            self.stdout.write(done.message)

    def act(self, crawl, options):
        from crawls import actions

        return getattr(actions, self.action)(crawl)
