"""The instance's steering while it crawls: the commands and messages in Redis, the time
limit, the disk, and this instance's WARC bytes reported in `<id>:size`."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from archiver_crawler.config import CrawlConfig
from archiver_crawler.frontier import Frontier
from archiver_crawler.output import Output
from archiver_crawler.state import Commands, CrawlState
from archiver_crawler.stop import StopReason

logger = logging.getLogger(__name__)


def disk_usage_percent(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return 100.0 * usage.used / usage.total if usage.total else 0.0


def disk_full(config: CrawlConfig) -> bool:
    config.collection_dir.mkdir(parents=True, exist_ok=True)
    percent = disk_usage_percent(config.collection_dir)
    if percent > config.disk_utilization:
        logger.error("disk utilization %.1f%% is above %d%%", percent, config.disk_utilization)
        return True
    return False


def commanded_stop(commands: Commands) -> StopReason | None:
    """The stop the crawl's commands ask for, the strongest first."""
    if commands.canceled:
        return StopReason.CANCELED
    if commands.stopping:
        return StopReason.STOPPING
    if commands.paused:
        return StopReason.PAUSED
    if commands.stop_one:
        return StopReason.STOP_ONE
    return None


class Controls:
    def __init__(self, config: CrawlConfig, state: CrawlState, frontier: Frontier,
                 output: Output, request_stop: Callable[[StopReason], None], started: float):
        self.config = config
        self.state = state
        self.frontier = frontier
        self.output = output
        self.request_stop = request_stop
        self.started = started
        # A parent of several processes forwards the messages instead (procs.py).
        self.apply_message = frontier.apply_message

    async def check(self, check_disk: bool = False) -> None:
        reason = commanded_stop(await self.state.read_commands())
        if reason is not None:
            self.request_stop(reason)
        for message in await self.state.pop_messages():
            await self.apply_message(message)
        if self.config.time_limit and time.monotonic() - self.started >= self.config.time_limit:
            self.request_stop(StopReason.TIME_LIMIT)
        if check_disk and self.config.disk_utilization and disk_full(self.config):
            self.request_stop(StopReason.DISK)
        await self.state.set_size(self.output.archive_size())
