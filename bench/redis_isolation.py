"""Per-crawl Redis isolation, measured both ways: ACL users on one server, or one server per crawl.

    .venv/bin/python bench/redis_isolation.py [--crawls 20] [--entries 500]

For N crawls it measures, on this machine:
- acl_users: one redis-server (configured like the embedded one: requirepass, 256 databases,
  append-only file); per crawl `ProgressStore.grant()` (ACL SETUSER) and a first PING as the
  crawl's user. Memory per crawl = growth of the server's RSS (and PSS) divided by N.
- server_per_crawl: N redis-servers, each started from its own 0600 config file and waited
  for until it answers. Memory per crawl = RSS (and PSS) of one server.
In both, each crawl then writes the same small state (a queue, a seen set, a status hash of
`--entries` URLs), so the memory includes what a crawl's data costs. Set-up time is the
wall time from nothing to all N crawls answering. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402 - the repository root must be importable first

from runner.progress import ProgressStore  # noqa: E402
from runner.redis_server import RedisEndpoint, answers, free_port  # noqa: E402


def memory_kb(pid: int) -> tuple[int, int]:
    """RSS and PSS of a process, in kB (PSS shares the binary's pages among the servers)."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "Rss":
            rss = int(value.split()[0])
        elif name == "Pss":
            pss = int(value.split()[0])
    return rss, pss


@contextlib.contextmanager
def server(folder: Path) -> Iterator[tuple[subprocess.Popen, RedisEndpoint]]:
    folder.mkdir(mode=0o700)
    port, password = free_port(), secrets.token_urlsafe(24)
    config = folder / "redis.conf"
    config.write_text("\n".join([
        "bind 127.0.0.1", f"port {port}", f"dir {folder}", "appendonly yes",
        "appendfsync everysec", "databases 256", 'save ""', f"requirepass {password}",
        "logfile redis.log", ""]))
    config.chmod(0o600)
    process = subprocess.Popen([shutil.which("redis-server") or "redis-server", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = RedisEndpoint(host="127.0.0.1", port=port, password=password, databases=256)
    try:
        while not answers(endpoint, timeout=0.2):
            if process.poll() is not None:
                raise SystemExit(f"redis-server did not start; see {folder / 'redis.log'}")
            time.sleep(0.005)
        yield process, endpoint
    finally:
        process.terminate()
        process.wait(timeout=30)


def write_state(endpoint: RedisEndpoint, db: int, crawl_id: str, entries: int) -> None:
    client = redis.Redis.from_url(endpoint.url(db))
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(entries):
            url = f"http://example.test/{crawl_id}/page/{i}"
            pipe.sadd(f"{crawl_id}:s", url)
            pipe.zadd(f"{crawl_id}:q", {json.dumps({"url": url, "seedId": 0, "depth": 1}): 1})
        pipe.hset(f"{crawl_id}:status", f"crawl-{crawl_id}-0", "running")
        pipe.execute()
    finally:
        client.close()


def acl_users(tmp: Path, crawls: int, entries: int) -> dict:
    with server(tmp / "shared") as (process, admin_endpoint):
        time.sleep(0.2)
        before = memory_kb(process.pid)
        store = ProgressStore(admin_endpoint)
        started = time.perf_counter()
        endpoints = []
        for n in range(crawls):
            endpoint = store.grant(n + 1, f"crawl{n}")
            client = redis.Redis.from_url(endpoint.url(n + 1))
            client.ping()
            client.close()
            endpoints.append(endpoint)
        setup = time.perf_counter() - started
        for n, endpoint in enumerate(endpoints):
            write_state(endpoint, n + 1, f"crawl{n}", entries)
        after = memory_kb(process.pid)
        store.close()
    return {"setup_s": round(setup, 4), "setup_ms_per_crawl": round(setup / crawls * 1000, 2),
            "base_rss_kb": before[0], "rss_kb_per_crawl": round((after[0] - before[0]) / crawls),
            "pss_kb_per_crawl": round((after[1] - before[1]) / crawls)}


def server_per_crawl(tmp: Path, crawls: int, entries: int) -> dict:
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        servers = [stack.enter_context(server(tmp / f"crawl{n}")) for n in range(crawls)]
        setup = time.perf_counter() - started
        for n, (_, endpoint) in enumerate(servers):
            write_state(endpoint, 1, f"crawl{n}", entries)
        memory = [memory_kb(process.pid) for process, _ in servers]
    return {"setup_s": round(setup, 4), "setup_ms_per_crawl": round(setup / crawls * 1000, 2),
            "rss_kb_per_crawl": round(statistics.mean(m[0] for m in memory)),
            "pss_kb_per_crawl": round(statistics.mean(m[1] for m in memory))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawls", type=int, default=20)
    parser.add_argument("--entries", type=int, default=500, help="URLs in each crawl's state")
    options = parser.parse_args()
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory(prefix="redis-isolation-") as tmp:
        result = {
            "redis": version.split()[2].removeprefix("v="), "crawls": options.crawls,
            "entries_per_crawl": options.entries,
            "acl_users": acl_users(Path(tmp), options.crawls, options.entries),
            "server_per_crawl": server_per_crawl(Path(tmp), options.crawls, options.entries),
        }
    print(json.dumps(result))  # noqa: T201 - the benchmark's output


if __name__ == "__main__":
    main()
