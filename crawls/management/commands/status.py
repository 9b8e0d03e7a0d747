"""`archiver status [ID]`: a table of recent and active crawls, or one crawl in detail."""

from __future__ import annotations

from django.db.models import Prefetch
from rich.console import Group
from rich.table import Table
from rich.text import Text

from crawls.cli import (
    ArchiverCommand,
    FittedTable,
    age,
    check_range,
    duration,
    find_crawl,
    int_arg,
    progress_bar,
)
from crawls.config import human_size
from crawls.diffing import shown_score
from crawls.lease import db_now
from crawls.models import Crawl, CrawlFile, CrawlStatus, review_state
from crawls.reasons import reason_line, reason_sentence

STATE_STYLE = {
    **dict.fromkeys(CrawlStatus.RUNNING_STATES, "green"),
    **dict.fromkeys(CrawlStatus.NOT_STARTED, "cyan"),
    CrawlStatus.PAUSED: "yellow",
    CrawlStatus.COMPLETE: "bold green",
    CrawlStatus.FAILED: "red",
    CrawlStatus.CANCELED: "dim",
}
GROUPS = {"active": CrawlStatus.ACTIVE, "final": CrawlStatus.FINAL}
LOG_LINES = 20
WORST_SHOWN = 5  # of a quality review's pages; the admin lists them all
MAX_LIMIT = 100_000  # more is `--all`


class Command(ArchiverCommand):
    help = "Show recent and active crawls, or one crawl in detail."

    def add_arguments(self, parser):
        parser.add_argument("id", nargs="?", metavar="ID", help="show this crawl (id or unique prefix)")
        parser.add_argument("--json", action="store_true", help="print crawl summaries as JSON")
        parser.add_argument("--all", action="store_true", help="every crawl, not only recent ones")
        parser.add_argument("--limit", type=int_arg, default=20, metavar="N",
                            help="finished crawls to show besides the active ones (default 20)")
        parser.add_argument("--state", choices=[*CrawlStatus.values, *GROUPS], metavar="S",
                            help="only crawls in this state (or: active, final)")

    def run(self, *, id, json, all, limit, state, **options):
        check_range("--limit", limit, 1, MAX_LIMIT)
        now = db_now()
        if id is not None:  # `status ''` is a mistake, not "list everything"
            crawl = find_crawl(id, Crawl.objects.select_related("org"))
            if json:
                self.write_json(crawl.summary(now))
            else:
                self.render(*detail(crawl, now))
            return
        crawls = listed_crawls(state, None if all else limit)
        if json:
            self.write_json([crawl.summary(now) for crawl in crawls])
        else:
            self.render(crawl_table(crawls, now))


def listed_crawls(state: str | None, limit: int | None) -> list[Crawl]:
    """Newest first: with a state, up to `limit` of them; else every active crawl plus
    the `limit` most recent others."""
    crawls = Crawl.objects.select_related("org").with_running_processes().prefetch_related(
        Prefetch("files", queryset=CrawlFile.objects.order_by("created_at"))
    ).order_by("-created_at", "-id")
    if state:
        chosen = crawls.filter(status__in=GROUPS.get(state, [state]))
        return list(chosen[:limit] if limit else chosen)
    others = crawls.exclude(status__in=CrawlStatus.ACTIVE)
    rows = list(crawls.filter(status__in=CrawlStatus.ACTIVE)) + list(others[:limit] if limit else others)
    return sorted(rows, key=lambda crawl: crawl.created_at, reverse=True)


def state_text(crawl: Crawl) -> Text:
    text = Text(crawl.status, style=STATE_STYLE.get(crawl.status, ""))
    if crawl.intent:
        text.append(f" ({crawl.intent} requested)", style="italic")
    return text


def reason(crawl: Crawl) -> str:
    """Why it waits or stopped, and the first line of its error, as sentences."""
    return reason_line(crawl)


def crawl_table(crawls: list[Crawl], now) -> FittedTable | Text:
    """One line per crawl, as wide as the console: a long reason, org or seed is cut; at a
    console too narrow to show them (80 columns), its seed and reason on a second line."""
    if not crawls:
        return Text("no crawls")
    table = FittedTable(("ID", "STATE", "PAGES", "SIZE", "REASON", "ORG", "AGE", "SEED"),
                        flexible={"REASON", "ORG", "SEED"}, second_line=("SEED", "REASON"))
    for crawl in crawls:
        table.add_row(
            crawl.short_id, state_text(crawl), progress_bar(crawl.pages_done, crawl.pages_found, width=8),
            crawl.size_human(), reason(crawl), crawl.org.slug, age(crawl.created_at, now),
            crawl.seeds[0] + (f" +{len(crawl.seeds) - 1}" if len(crawl.seeds) > 1 else ""),
        )
    return table


def detail(crawl: Crawl, now) -> list:
    sections = [shown(name, part) for name, part in (
        ("crawl", lambda: overview(crawl, now)), ("limits", lambda: limits(crawl, now)),
        ("config", lambda: config_table(crawl)), ("files", lambda: files_table(crawl)),
        ("quality review", lambda: review_table(crawl)),
        ("processes", lambda: processes_table(crawl, now)), ("log", lambda: log_lines(crawl)),
    )]
    sections = [section for section in sections if section is not None]
    spaced = []
    for section in sections:
        spaced += [section, Text("")]
    return spaced[:-1]


def shown(name: str, part):
    """One section; a damaged stored value (JSON of the wrong shape) fails only that section."""
    try:
        return part()
    except (AttributeError, TypeError, KeyError, ValueError):
        return Text(f"{name}: cannot be shown: its stored data is damaged", style="red")


def key_values(title: str, rows) -> Table:
    table = Table(box=None, show_header=False, title=title, title_justify="left",
                  title_style="bold", pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(key, value if isinstance(value, Text) else str(value))
    return table


def overview(crawl: Crawl, now) -> Table:
    return key_values(f"crawl {crawl.id}", [
        ("state", state_text(crawl)),
        ("reason", reason_sentence(crawl) or "-"),
        ("error", crawl.error.strip() or "-"),
        *([("error detail", crawl.error_detail.strip())] if crawl.error_detail.strip() else []),
        ("org", crawl.org.slug),
        ("seeds", "\n".join(crawl.seeds)),
        ("tags", ", ".join(crawl.tags) or "-"),
        ("pages", f"{progress_bar(crawl.pages_done, crawl.pages_found)} ({crawl.pages_failed} failed)"),
        ("size", crawl.size_human()),
        ("running time", duration(crawl.elapsed_now(now))),
        ("execution time", duration(crawl.exec_seconds)),
        ("attempts", crawl.attempts),
        ("created", f"{crawl.created_at:%Y-%m-%d %H:%M:%S} ({age(crawl.created_at, now)} ago)"),
        ("started", f"{crawl.started_at:%Y-%m-%d %H:%M:%S}" if crawl.started_at else "-"),
        ("finished", f"{crawl.finished_at:%Y-%m-%d %H:%M:%S}" if crawl.finished_at else "-"),
    ])


def limits(crawl: Crawl, now) -> Table:
    config = crawl.config
    page_limit = crawl.effective_page_limit()

    def used(value: str, limit: str | None) -> str:
        return f"{value} of {limit}" if limit else f"{value} (no limit)"

    return key_values("limits", [
        ("pages", used(str(crawl.pages_done), page_limit and str(page_limit))),
        ("size", used(crawl.size_human(), config.get("size_limit") and human_size(config["size_limit"]))),
        ("time", used(duration(crawl.elapsed_now(now)), config.get("time_limit") and duration(config["time_limit"]))),
    ])


def config_table(crawl: Crawl) -> Table:
    shown = {**crawl.config}
    if shown.get("size_limit"):
        shown["size_limit"] = f"{human_size(shown['size_limit'])} ({shown['size_limit']} bytes)"
    if shown.get("time_limit"):
        shown["time_limit"] = duration(shown["time_limit"])
    rows = [(key, "-" if value in (None, []) else value) for key, value in shown.items() if key != "seeds"]
    if crawl.config_override:  # a retry of failed pages crawls other seeds this session
        rows.append(("this session", ", ".join(f"{k}={v}" for k, v in crawl.config_override.items())))
    return key_values("config", rows)


def files_table(crawl: Crawl) -> Group | Text:
    files = list(crawl.files.order_by("created_at"))
    if not files:
        return Text("files: none yet", style="dim")
    table = FittedTable(("PATH", "SIZE", "SHA256"), flexible={"PATH"})
    for file in files:
        table.add_row(file.path, human_size(file.size), file.sha256[:16])
    return Group(Text("files", style="bold"), table)


def review_table(crawl: Crawl) -> Group | None:
    """Its quality review (--qa or `archiver qa`), with its worst pages; None if never asked."""
    state = review_state(crawl)
    if state is None:
        return None

    summary = key_values("quality review", [
        ("status", state["status"]), ("error", state["error"] or "-"),
        ("pages", f"{state['pages']} ({state['below_0_80']} below 0.80, "
                  f"{state['failed_pages']} not replayed)"),
        ("mean", shown_score(state["mean"])), ("worst", shown_score(state["worst"])),
    ])
    worst = list(crawl.page_reviews.order_by("score", "id")[:WORST_SHOWN])
    if not worst:
        return Group(summary)
    table = Table(box=None, pad_edge=False, title=f"its {len(worst)} worst page(s)",
                  title_justify="left", title_style="dim")
    for column in ("SCORE", "TEXT", "RESOURCES", "SCREENSHOT"):
        table.add_column(column, justify="right")
    table.add_column("URL", overflow="fold")
    for page in worst:
        table.add_row(shown_score(page.score), shown_score(page.text_score), shown_score(page.resources_score),
                      shown_score(page.screenshot_score), page.url)
    return Group(summary, table)


def processes_table(crawl: Crawl, now) -> Group | Text:
    processes = list(crawl.processes.order_by("-created_at")[:20])
    if not processes:
        return Text("processes: none", style="dim")
    table = FittedTable(("HOST", "LAUNCHER", "STATUS", "EXIT", "PAGES", "SIZE", "STARTED", "ENDED"),
                        flexible={"HOST", "EXIT"})
    for process in reversed(processes):
        exit_text = "-" if process.exit_code is None else f"{process.exit_code} {process.exit_reason}".strip()
        table.add_row(process.hostname, process.launcher, process.status, exit_text,
                      *process.counts_shown(), age(process.started_at, now), age(process.ended_at, now))
    return Group(Text("processes", style="bold"), table)


def log_lines(crawl: Crawl) -> Group | Text:
    lines = list(crawl.logs.order_by("-id")[:LOG_LINES])
    if not lines:
        return Text("log: empty", style="dim")
    rendered = [Text(f"log (last {len(lines)})", style="bold")]
    for line in reversed(lines):
        style = "red" if line.level in ("error", "fatal") else ""
        rendered.append(Text(f"{line.created_at:%H:%M:%S} {line.level:<7} {line.source}: {line.message}", style=style))
    return Group(*rendered)
