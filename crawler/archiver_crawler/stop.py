"""Why an instance stops, and the stop signals that arrived before the crawler could act.

The console script (launch.py) records SIGTERM/SIGINT here before its 0.3 s of imports: as
PID 1 in a container a signal without a handler is ignored, and a `docker stop` in that
window would be lost. The crawler (crawl.py) replays them once its own handlers are in
place. Both import this module, and it imports nothing of the crawler's but its exit codes
(the standard library only), so the entry point stays fast and neither imports the other.
"""

from __future__ import annotations

import enum
import signal

from archiver_crawler.errors import ExitCode

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# Signals received before the crawler's handlers were installed, oldest first.
received: list[int] = []


def remember(signum: int, frame) -> None:
    received.append(signum)


def catch_early() -> None:
    """Record stop signals from now on; the crawler replays them (see `received`)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, remember)


class StopReason(enum.Enum):
    """Why the workers stop claiming pages; decides status, WACZ and exit code."""

    FINISHED = "finished"
    STOPPING = "stopping"
    STOP_ONE = "stopone"
    PAUSED = "paused"
    SIGNAL = "signal"
    SIZE_LIMIT = "size-limit"
    TIME_LIMIT = "time-limit"
    DISK = "disk-utilization"
    CANCELED = "canceled"
    FORCED = "forced"


# Stops that abandon the pages in flight instead of finishing them.
ABANDONING = (StopReason.CANCELED, StopReason.FORCED)

# reason -> (write the WACZ, final status, exit code)
OUTCOMES = {
    StopReason.FINISHED: (True, "done", ExitCode.SUCCESS),
    StopReason.STOPPING: (True, "done", ExitCode.SUCCESS),
    StopReason.STOP_ONE: (True, "done", ExitCode.SUCCESS),
    StopReason.PAUSED: (True, "interrupted", ExitCode.SUCCESS),
    StopReason.SIGNAL: (True, "interrupted", ExitCode.INTERRUPTED),
    StopReason.SIZE_LIMIT: (True, "interrupted", ExitCode.SIZE_LIMIT),
    StopReason.TIME_LIMIT: (True, "interrupted", ExitCode.TIME_LIMIT),
    StopReason.DISK: (True, "interrupted", ExitCode.DISK_UTILIZATION),
    StopReason.CANCELED: (False, "canceled", ExitCode.SUCCESS),
    StopReason.FORCED: (False, "interrupted", ExitCode.FORCED_INTERRUPT),
}
