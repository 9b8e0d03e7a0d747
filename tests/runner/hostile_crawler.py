"""A compromised crawler, for tests: started by the local launcher through
ARCHIVER_LOCAL_CRAWLER_COMMAND, it tries what a crawler running a hostile page's code could.

    python hostile_crawler.py --config <cwd>/crawler.json ... --crawlId ID --cwd DIR

First session: it records what it can see (its environment, every other process's
command line) and what Redis lets it do with its own identity, plants links, a FIFO and a
device in its folder, and crashes (exit 1) so the runner looks at its folder and launches
it again. Second session: it reports itself done and exits 0. Everything it learns goes to
`<cwd>/hostile-report-<n>.json` for the test to read. Its targets (a host file, a host folder,
another crawl's database) are in `<data_dir>/hostile.json`, since its environment is an
allowlist.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import redis


def option(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


def try_redis(url: str, crawl_id: str, other_db: int) -> dict:
    client = redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)
    tried = {}
    attempts = {
        "own_write": lambda: client.set(f"{crawl_id}:hostile", "1"),
        "select_other": lambda: client.execute_command("SELECT", other_db),
        "flushall": lambda: client.flushall(),
        "flushdb": lambda: client.flushdb(),
        "config_set": lambda: client.config_set("dir", "/tmp"),
        "shutdown": lambda: client.execute_command("SHUTDOWN", "NOSAVE"),
        "replicaof": lambda: client.execute_command("REPLICAOF", "127.0.0.1", "1"),
        "acl_list": lambda: client.execute_command("ACL", "LIST"),
        "keys": lambda: client.keys("*"),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            tried[name] = "allowed"
        except redis.RedisError as exc:
            tried[name] = f"refused: {str(exc)[:80]}"
    return tried


def command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return lines


def plant(collection: Path, targets: dict) -> None:
    (collection / "archive").mkdir(parents=True, exist_ok=True)
    (collection / "pages").mkdir(parents=True, exist_ok=True)
    crawl_id = collection.name
    (collection / f"{crawl_id}.wacz").symlink_to(targets["host_file"])
    (collection / "archive" / "rec-host.warc.gz").symlink_to(targets["host_file"])
    (collection / "logs").symlink_to(targets["host_folder"], target_is_directory=True)
    os.mkfifo(collection / "pages" / "pages.jsonl")
    os.mknod(collection / "archive" / "rec-zero.warc.gz", 0o600 | 0o020000, os.makedev(1, 5))


def main() -> int:
    cwd, crawl_id = Path(option("--cwd")), option("--crawlId")
    config = json.loads(Path(option("--config")).read_text())
    # <data_dir>/crawls/<crawl>/<instance>: the test leaves its targets in <data_dir>/hostile.json
    targets = json.loads((cwd.parent.parent.parent / "hostile.json").read_text())
    url = config["redisStoreUrl"]
    session = len(list(cwd.glob("hostile-report-*.json")))
    report = {"environ": dict(os.environ), "command_lines": command_lines(), "session": session}
    client = redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)
    host = os.environ.get("CRAWLER_HOSTNAME", "")
    if session == 0:
        report["redis"] = try_redis(url, crawl_id, targets["other_db"])
        plant(cwd / "collections" / crawl_id, targets)
        (cwd / "crawler.json").unlink()
        (cwd / "crawler.json").symlink_to(targets["host_file"])
        (cwd / f"hostile-report-{session}.json").write_text(json.dumps(report))
        return 1  # a crash: the runner looks at the folder, then launches us again
    client.set(f"{crawl_id}:d", 1)
    client.hset(f"{crawl_id}:status", host, "done")
    (cwd / f"hostile-report-{session}.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
