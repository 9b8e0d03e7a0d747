"""`archiver search QUERY [--org SLUG] [--crawl ID] [--since DATE] [--limit N] [--json]`:
the archived pages whose title or text match, best first (crawls/search.py): one row per URL
listing its captures; --json one object per capture, as it always did."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import CommandError
from rich.table import Table
from rich.text import Text

from crawls import search, search_groups
from crawls.cli import ArchiverCommand, OneLineParser, arg_type, int_arg
from crawls.models import Crawl, Org


def since_date(text: str) -> dt.datetime:
    """A date (2026-12-01) or a date and time (2026-12-01T10:00, UTC unless it says)."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a date like 2026-12-01 or 2026-12-01T10:00") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


class QueryParser(OneLineParser):
    """Takes a query that starts with `-` (`archiver search -walrus`: pages without the
    word) as the query, when it is no option of the command; argparse alone would call
    it an unknown option and ask for a QUERY."""

    def parse_args(self, args=None, namespace=None):
        options, extra = self.parse_known_args(args, namespace)
        if options.query is None and len(extra) == 1 and extra[0].startswith("-"):
            options.query, extra = extra[0], []
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        if options.query is None:
            self.error("the following arguments are required: QUERY")
        return options


class Command(ArchiverCommand):
    help = ("Search the text of archived pages. Words must all appear; \"a phrase\", word*, "
            "a OR b, -word or NOT word, and ( ) work too (docs/cli.md, Search).")

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = QueryParser  # as ArchiverCommand does: error() and parse_args() only
        return parser

    def add_arguments(self, parser):
        # Optional to argparse so that a query starting with `-` reaches QueryParser, which
        # still requires one.
        parser.add_argument("query", metavar="QUERY", nargs="?")
        parser.add_argument("--org", metavar="SLUG", help="only this org's crawls")
        parser.add_argument("--crawl", metavar="ID", help="only this crawl (an id or a prefix)")
        parser.add_argument("--since", type=arg_type(since_date), metavar="DATE",
                            help="only pages captured since then")
        parser.add_argument("--limit", type=int_arg, default=20, metavar="N",
                            help=f"at most N results (1 to {search.MAX_LIMIT}, default 20)")
        parser.add_argument("--json", action="store_true", help="print the results as JSON")

    def run(self, *, query, org, crawl, since, limit, json, **options):
        org_id = None
        if org is not None:
            org_id = Org.objects.filter(slug=org).values_list("pk", flat=True).first()
            if org_id is None:
                raise CommandError(f"--org {org}: no such org")
        crawl_id = None
        if crawl is not None:
            crawl_id = Crawl.objects.by_prefix(crawl).pk
        try:
            hits = search.search(query, org=org_id, crawl=crawl_id, since=since, limit=limit)
        except search.QueryError as exc:
            raise CommandError(f"search: {exc}") from None
        if json:
            self.write_json([hit.as_dict() for hit in hits])
        elif not hits:
            self.stdout.write("no page matches")
        else:
            self.render(result_table(search_groups.grouped(hits, query, org=org_id, crawl=crawl_id,
                                                           since=since)))


def result_table(results: list[search_groups.Result]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("TITLE", "URL", "CAPTURED  CRAWL", "SNIPPET"):
        table.add_column(column, overflow="fold", no_wrap=column.startswith("CAPTURED"))
    for result in results:
        table.add_row(result.best.title or "-", result.url,
                      "\n".join(capture_line(hit) for hit in result.captures),
                      snippet_text(result.best.snippet))
    return table


def capture_line(hit: search.Hit) -> str:
    when = hit.captured_at.strftime("%Y-%m-%d %H:%M") if hit.captured_at else "-".ljust(16)
    return f"{when}  {hit.crawl_id[:8]}"


def snippet_text(snippet: str) -> Text:
    """The snippet with its matches in bold (no markup from the page is interpreted)."""
    text = Text()
    for i, part in enumerate(snippet.replace(search.MARK_END, search.MARK_START)
                             .split(search.MARK_START)):
        text.append(part, style="bold yellow" if i % 2 else "")
    return text
