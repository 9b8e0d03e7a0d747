"""The console scripts' entry point: catch SIGTERM/SIGINT first, then import the crawler.

Importing aiohttp, redis-py and the rest takes about 0.3 s, and as PID 1 in a container a
signal without a handler is ignored: a `docker stop` in that window would be lost. The
handler only records the signal (in stop.py); the crawler replays it once its own handlers
are in place.
"""

from __future__ import annotations

from archiver_crawler import stop


def main() -> int:
    stop.catch_early()
    from archiver_crawler.cli import main as run

    return run()
