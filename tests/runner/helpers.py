"""Helpers for runner integration tests: drive a runner on the real clock, slow sites, files."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from crawls.models import Crawl
from tests.sitegen import serve_site


def drive(runner, until: Callable[[], bool], timeout: float = 60.0, pause: float = 0.1) -> None:
    """Tick `runner` on the real clock until `until()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            states = list(Crawl.objects.values_list("id", "status", "pages_done", "waiting_reason", "error"))
            logs = "\n".join(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}"
                             for path in runner.settings.crawls_dir.glob("*/*/process-*.log"))
            raise AssertionError(f"not reached within {timeout} s; crawls: {states}\n{logs}")
        runner.tick()
        time.sleep(pause)


def status_of(crawl: Crawl) -> str:
    return Crawl.objects.values_list("status", flat=True).get(pk=crawl.pk)


def is_final(crawl: Crawl) -> Callable[[], bool]:
    return lambda: Crawl.objects.get(pk=crawl.pk).is_final


@contextmanager
def slow_site(pages: int = 30, delay: float = 0.2):
    """A generated site whose pages each take `delay` seconds: a crawl that runs a while."""
    with serve_site(pages=pages) as site:
        for path, response in site.routes.items():
            if path.startswith("/gen/") and path.endswith(".html"):
                response.delay = delay
        yield site


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (to prove nothing was left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found
