"""Host admission: is there room on this machine to start one more crawl?

A crawl waits (`waiting_capacity`, with a reason a person can read) while the data dir's
filesystem is fuller than ARCHIVER_DISK_THRESHOLD or the memory available is less than
its instances need. `wait_reason()` is pure, for tests; `crawl_wait_reason()` reads the
real machine.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from archiver import conf
from crawls.config import CrawlConfig, human_size

log = logging.getLogger(__name__)

MIB = 2**20
# (first worker, each further worker) of one instance, by what it runs. HTTP mode fetches
# without a browser. Browser mode runs Chromium: one archiver crawler of the Python docs
# peaked at 480 MB PSS with 1 worker and 571 MB with 4, Chromium's processes included
# (2026-12-03); pages heavier than those docs cost their tabs more, hence the margin.
# browsertrix-crawler: what Browsertrix gives it on Kubernetes (1 GiB + 768 MiB a worker).
MEMORY_PER_INSTANCE = 256 * MIB
MEMORY_PER_EXTRA_WORKER = 64 * MIB
MEMORY_BROWSER = (768 * MIB, 128 * MIB)
MEMORY_BROWSERTRIX = (1024 * MIB, 768 * MIB)
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class HostUsage:
    """The numbers admission looks at. `memory_available` None = unknown (not Linux)."""

    disk_used: int
    disk_free: int
    memory_available: int | None = None

    @property
    def disk_used_percent(self) -> float:
        # As df counts it: blocks reserved for root are neither used nor available.
        capacity = self.disk_used + self.disk_free
        return 100.0 * self.disk_used / capacity if capacity else 100.0


def memory_needed(config: CrawlConfig, browsertrix: bool = False) -> int:
    """The memory a crawl's instances need: `browsertrix` if the configured crawler is
    browsertrix-crawler, else archiver's own, in the crawl's mode."""
    if browsertrix:
        first, extra = MEMORY_BROWSERTRIX
    elif config.browser:
        first, extra = MEMORY_BROWSER
    else:
        first, extra = MEMORY_PER_INSTANCE, MEMORY_PER_EXTRA_WORKER
    return config.scale * (first + extra * (config.workers - 1))


PACKAGING_MARGIN = 64 * MIB  # beyond a crawl's unpacked bytes, for its index and zip overhead


def packaging_room(unpacked_bytes: int) -> int:
    """Free disk a crawl needs to package what it has: a WACZ holds its WARCs once more."""
    return unpacked_bytes + PACKAGING_MARGIN


def wait_reason(usage: HostUsage, disk_threshold_percent: float, memory: int,
                reserve: int = 0) -> str | None:
    """Why a crawl needing `memory` bytes (and `reserve` bytes of free disk to package what
    it holds) must wait on a host using `usage`, or None."""
    used = usage.disk_used_percent
    if used >= disk_threshold_percent:
        return f"waiting: disk {used:.0f} % full (limit {disk_threshold_percent:g} %)"
    if reserve and usage.disk_free < reserve:
        return (f"waiting: disk has {human_size(usage.disk_free)} free, "
                f"{human_size(reserve)} needed to package the crawl")
    if usage.memory_available is not None and usage.memory_available < memory:
        return (f"waiting: {human_size(usage.memory_available)} of memory available, "
                f"{human_size(memory)} needed")
    return None


def read_memory_available(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable from /proc/meminfo, in bytes; None where it cannot be read."""
    try:
        text = meminfo.read_text()
    except OSError as exc:
        log.debug("cannot read %s: %s", meminfo, exc)
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            return int(value.split()[0]) * 1024
    return None


def read_host_usage(data_dir: Path) -> HostUsage:
    """Disk use of the filesystem holding `data_dir` (or its nearest existing parent)."""
    path = data_dir
    while not path.exists() and path != path.parent:
        path = path.parent
    disk = shutil.disk_usage(path)
    return HostUsage(disk_used=disk.used, disk_free=disk.free,
                     memory_available=read_memory_available())


def crawl_wait_reason(crawl) -> str | None:
    """Why this machine has no room for `crawl` now, or None."""
    settings = conf.get()
    usage = read_host_usage(settings.data_dir)
    needed = memory_needed(crawl.launch_config(), settings.browser_crawler())
    return wait_reason(usage, settings.disk_threshold_percent, needed)


def disk_full_reason() -> str | None:
    """Why running crawls must pause for disk space now, or None (memory is not checked)."""
    settings = conf.get()
    usage = read_host_usage(settings.data_dir)
    return wait_reason(HostUsage(usage.disk_used, usage.disk_free), settings.disk_threshold_percent, 0)
