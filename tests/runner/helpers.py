"""Helpers for runner integration tests: what a crawl reached, slow sites, files (a runner is
driven by tests/waiting.py's `drive`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from crawls.models import Crawl
from tests.sitegen import serve_site
from tests.waiting import drive, wait_for_pages


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


def stop_processes_of(data_dir: Path) -> None:
    """What an installation on `data_dir` left running when a test failed: its crawlers
    (killed) and its embedded Redis (stopped, so it flushes its append-only file)."""
    import signal

    for pid in processes_mentioning(str(data_dir)):
        os.kill(pid, signal.SIGKILL)
    state = data_dir / "run" / "redis.json"
    if state.exists():
        port = json.loads(state.read_text())["port"]
        for pid in processes_mentioning(f"redis-server 127.0.0.1:{port}"):
            os.kill(pid, signal.SIGTERM)


def wacz_responses(path: Path) -> list[str]:
    """The target URI of every response record in the WARCs a WACZ holds."""
    from warcio.archiveiterator import ArchiveIterator

    urls = []
    with zipfile.ZipFile(path) as wacz:
        for name in wacz.namelist():
            if name.startswith("archive/") and ".warc" in name:
                with wacz.open(name) as stream:
                    urls += [record.rec_headers.get_header("WARC-Target-URI")
                             for record in ArchiveIterator(stream) if record.rec_type == "response"]
    return urls


def wacz_pages(path: Path) -> list[str]:
    """The page URLs listed in a WACZ's pages/*.jsonl (header lines left out)."""
    urls = []
    with zipfile.ZipFile(path) as wacz:
        for name in wacz.namelist():
            if name.startswith("pages/") and name.endswith(".jsonl"):
                lines = wacz.read(name).decode().splitlines()
                urls += [json.loads(line)["url"] for line in lines if '"url"' in line]
    return urls


def assert_disjoint_archives(paths: list[Path], pages: set[str]) -> None:
    """Each page's response is in exactly one of the WACZ files, and listed in that one only."""
    seen: list[str] = []
    for path in paths:
        responses, listed = wacz_responses(path), wacz_pages(path)
        assert responses, f"{path.name} holds no response"
        assert len(responses) == len(set(responses)), f"{path.name} repeats a response"
        assert set(listed) <= set(responses), f"{path.name} lists pages it does not hold"
        seen += responses
    duplicates = {url for url in seen if seen.count(url) > 1}
    assert not duplicates, f"in more than one archive: {sorted(duplicates)[:5]}"
    assert pages <= set(seen), f"never archived: {sorted(pages - set(seen))[:5]}"


def our_containers(docker_client, settings) -> list:
    """The containers of the installation `settings` name (running or not)."""
    from runner.launchers import install_id

    label = f"archiver.install={install_id(settings)}"
    return docker_client.containers.list(all=True, filters={"label": label})


def gen_pages(site) -> set[str]:
    """The generated site's page URLs (what a crawl of /gen/ must archive)."""
    return {site.root + path for path in site.routes
            if path.startswith("/gen/") and path.endswith(("/", ".html"))}


def fetched_more_than_once(site) -> dict[str, int]:
    return {path: n for path, n in site.requests.items() if n > 1}


def kept_files(crawl: Crawl, settings) -> list[Path]:
    return [settings.data_dir / f.path for f in crawl.files.order_by("created_at")]


def archived_bytes(runner, crawl: Crawl, host: str) -> int:
    crawl.refresh_from_db()
    return int(runner.store.client(crawl.redis_db).hget(f"{crawl.pk}:size", host) or 0)


def pause_and_resume(runner, make_crawl, settings, running: Callable[[], list]) -> Crawl:
    """A crawl of a slow site paused after 3 pages (nothing of it left `running()`), resumed
    and finished: complete, every page fetched once, into two disjoint archives."""
    import io

    from django.core.management import call_command

    with slow_site(pages=20, delay=0.1) as site:
        crawl = make_crawl(site.url)
        wait_for_pages(runner, crawl, 3)
        call_command("pause", crawl.pk, stdout=io.StringIO())
        drive(runner, lambda: status_of(crawl) == "paused", timeout=30)
        assert running() == []

        call_command("resume", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl), timeout=60)
        twice = fetched_more_than_once(site)

    crawl.refresh_from_db()
    assert crawl.status == "complete", crawl.error
    assert crawl.pages_done == 21 and twice == {}
    paths = kept_files(crawl, settings)
    assert len(paths) == 2
    assert_disjoint_archives(paths, gen_pages(site))
    return crawl


def script(path: Path, body: str) -> list[str]:
    """A crawler command of the test's own: an executable shell script at `path`."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return [str(path)]
