"""The console scripts' entry point: catch SIGTERM/SIGINT first, then import the crawler.

Importing aiohttp, redis-py and the rest takes about 0.3 s, and as PID 1 in a container a
signal without a handler is ignored: a `docker stop` in that window would be lost. The
handler only records the signal; the crawler replays it once its own handlers are in place.
"""

from __future__ import annotations

import signal

received: list[int] = []


def _remember(signum: int, frame) -> None:
    received.append(signum)


def main() -> int:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _remember)
    from archiver_crawler.cli import main as run

    return run()
