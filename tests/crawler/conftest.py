"""Fixtures for the crawler's tests: the generated site, and ways to run the crawler.

`crawl(...)` runs one instance in this process (fast: no interpreter start);
`spawn(...)` starts the real `archiver-crawler` console script as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from archiver_crawler.cli import run_instance
from archiver_crawler.config import parse_args

from tests.crawler.running import ALLOW_LOOPBACK, CRAWLER, base_args
from tests.sitegen import serve_site


@pytest.fixture
def site():
    with serve_site(slow_delay=0.05) as s:
        yield s


@pytest.fixture
def big_site():
    """/gen/ with 40 pages: crawls of it last long enough (with --hostDelay) to be steered."""
    with serve_site(pages=40) as s:
        yield s


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@dataclass
class Collection:
    dir: Path

    @property
    def pages(self) -> list[dict]:
        path = self.dir / "pages" / "pages.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()[1:]]

    @property
    def page_urls(self) -> set[str]:
        return {p["url"] for p in self.pages}

    @property
    def wacz(self) -> Path:
        return self.dir / f"{self.dir.name}.wacz"

    @property
    def log_text(self) -> str:
        return "".join(p.read_text() for p in sorted((self.dir / "logs").glob("*.log")))


@pytest.fixture
def crawl(redis_url, tmp_path):
    """Run one instance in-process to its end: crawl(url, *options) -> (exit code, Collection)."""

    def run(url: str, *extra: str, instance: str = "crawl-crawl1-0",
            allow: str | None = ALLOW_LOOPBACK):
        config = parse_args(base_args(url, redis_url, tmp_path, *extra, allow=allow),
                            env={"CRAWLER_HOSTNAME": instance})
        code = asyncio.run(run_instance(config))
        return int(code), Collection(tmp_path / "collections" / "coll")

    return run


class Spawned:
    def __init__(self, proc: subprocess.Popen, collection: Collection):
        self.proc = proc
        self.collection = collection

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    @property
    def stderr(self) -> str:
        return self.proc.stderr.read().decode() if self.proc.stderr else ""


@pytest.fixture
def spawn(redis_url, tmp_path):
    """Start the real console script: spawn(url, *options, instance=...) -> Spawned."""
    started: list[subprocess.Popen] = []

    def start(url: str, *extra: str, instance: str = "crawl-crawl1-0", cwd: Path | None = None,
              redis: str | None = None, allow: str | None = ALLOW_LOOPBACK) -> Spawned:
        cwd = cwd or tmp_path
        env = dict(os.environ, CRAWLER_HOSTNAME=instance)
        proc = subprocess.Popen([CRAWLER, *base_args(url, redis or redis_url, cwd, *extra,
                                                     allow=allow)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started.append(proc)
        return Spawned(proc, Collection(cwd / "collections" / "coll"))

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


