"""How the crawler's tests run it: its console script, and the options every test crawl has."""

from __future__ import annotations

import sys
from pathlib import Path

CRAWLER = str(Path(sys.executable).parent / "archiver-crawler")
# The test sites are on 127.0.0.1, which the crawl address policy refuses unless allowed.
ALLOW_LOOPBACK = "127.0.0.0/8"


def base_args(url: str, redis_url: str, cwd: Path, *extra: str, crawl_id: str = "crawl1",
              collection: str = "coll", allow: str | None = ALLOW_LOOPBACK) -> list[str]:
    """The options every test crawl has; `allow=None` leaves the address policy's default."""
    return ["--url", url, "--redisStoreUrl", redis_url, "--crawlId", crawl_id,
            "--collection", collection, "--cwd", str(cwd), "--pageLoadTimeout", "5",
            "--diskUtilization", "0", *(["--allowNetworks", allow] if allow else []), *extra]
