"""What the daemon shows while it runs: a rich table on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import logging
import time

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from crawls.config import human_size

log = logging.getLogger("runner")

LOG_EVERY = 10.0  # seconds between two lines about an unchanged crawl


class Rates:
    """Pages per second per crawl, from the last two readings."""

    def __init__(self):
        self._last: dict[str, tuple[float, int]] = {}

    def rate(self, crawl) -> float:
        now = time.monotonic()
        previous = self._last.get(crawl.pk)
        self._last[crawl.pk] = (now, crawl.pages_done)
        if not previous or now <= previous[0]:
            return 0.0
        return max(crawl.pages_done - previous[1], 0) / (now - previous[0])


def line(crawl) -> str:
    text = (f"[runner] crawl {crawl.short_id} {crawl.status} pages={crawl.pages_done}/{crawl.pages_found} "
            f"size={human_size(crawl.size_bytes)}")
    if crawl.waiting_reason:
        text += f" ({crawl.waiting_reason})"
    return text


class LogView:
    """Off a terminal: one line per crawl when it changes, and every LOG_EVERY seconds."""

    def __init__(self):
        self._said: dict[str, tuple[str, float]] = {}

    def update(self, runner) -> None:
        now = time.monotonic()
        for crawl in runner.seen.values():
            text = line(crawl)
            said, at = self._said.get(crawl.pk, ("", 0.0))
            if text != said or now - at >= LOG_EVERY:
                log.info("%s", text)
                self._said[crawl.pk] = (text, now)

    def close(self) -> None:
        pass


class LiveView:
    """On a terminal: a table of active crawls and the latest events, redrawn every tick."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console()
        self.rates = Rates()
        self.live = Live(console=self.console, auto_refresh=False, transient=False)
        self.live.start()

    def update(self, runner) -> None:
        table = Table(title=f"archiver runner {runner.id} — {len(runner.seen)} active", expand=True)
        for column in ("crawl", "state", "pages", "", "size", "rate", "instances", "note"):
            table.add_column(column, no_wrap=column != "note")
        for crawl in runner.seen.values():
            found = max(crawl.pages_found, 1)
            table.add_row(
                crawl.short_id, crawl.status, f"{crawl.pages_done}/{crawl.pages_found}",
                ProgressBar(total=found, completed=min(crawl.pages_done, found), width=20),
                human_size(crawl.size_bytes), f"{self.rates.rate(crawl):.1f}/s", str(crawl.scale),
                crawl.waiting_reason or crawl.error or "",
            )
        events = Text("\n".join(list(runner.events)[-8:]), style="dim")
        self.live.update(Group(table, events), refresh=True)

    def close(self) -> None:
        self.live.stop()
