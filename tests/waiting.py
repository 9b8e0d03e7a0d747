"""Waiting for a state, the one way the suite waits: poll a predicate until a deadline.

Deadlines are generous (what a machine three times slower than a developer's laptop needs,
with Chromium, Docker or gunicorn starting): a passing test never waits for them, a
failing one reports what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Long enough for a process, a browser or a server to start on a busy machine.
DEFAULT_TIMEOUT = 60.0
# The bound of a test that checks a call ends rather than hangs (a FIFO opened, /dev/zero
# read, an engine or a receiver that never answers): far above what the call takes on a
# busy machine, so it judges no speed. What the call did (its refusal, requests, bytes
# read) is what such a test asserts.
HANG = 60.0


def wait_for(predicate: Callable[[], object], timeout: float = DEFAULT_TIMEOUT, pause: float = 0.05,
             what: str = "condition", explain: Callable[[], str] | None = None) -> object:
    """Poll until `predicate()` is truthy and return its value; AssertionError after `timeout` s,
    with what `explain()` says then (a log's tail, the rows' states)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"{what} not reached within {timeout:g} s{detail}")
        time.sleep(pause)


def drive(runner, until: Callable[[], bool], timeout: float = DEFAULT_TIMEOUT, pause: float = 0.1) -> None:
    """Tick `runner` on the real clock until `until()` holds; on failure the crawls' states
    and their crawlers' logs."""
    def reached() -> bool:
        if until():
            return True
        runner.tick()
        return False

    wait_for(reached, timeout, pause, "the runner's goal", explain=lambda: runner_report(runner))


def wait_for_pages(runner, crawl, pages: int, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Tick `runner` until `crawl` counts `pages` pages done."""
    from crawls.models import Crawl  # here only: this module imports nothing of the product

    drive(runner, lambda: Crawl.objects.get(pk=crawl.pk).pages_done >= pages, timeout=timeout)


def wait_for_exit(launcher, ref: str, timeout: float = DEFAULT_TIMEOUT):
    """Wait until the launcher's instance `ref` has ended; its Instance then (None if gone).
    On failure the instance's log."""
    seen = []

    def ended() -> bool:
        seen.append(launcher.inspect(ref))
        return seen[-1] is None or not seen[-1].running

    wait_for(ended, timeout, 0.1, f"the end of {ref}", explain=lambda: launcher.log_tail(ref))
    return seen[-1]


def runner_report(runner) -> str:
    from crawls.models import Crawl

    states = list(Crawl.objects.values_list("id", "status", "pages_done", "waiting_reason", "error"))
    logs = "\n".join(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}"
                     for path in runner.settings.crawls_dir.glob("*/*/process-*.log"))
    return f"crawls: {states}\n{logs}"
