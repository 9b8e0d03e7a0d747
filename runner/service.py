"""Putting a runner together from settings: Redis (embedded or not), the launcher, the view."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import DatabaseError

from archiver.conf import Settings
from crawls import admission, storage
from crawls.models import Crawl
from runner.daemon import Runner, acquire_runner_lock
from runner.launchers import make_launcher
from runner.live import LiveView, LogView
from runner.progress import ProgressStore
from runner.redis_server import EmbeddedRedis, RedisWatch, connect

log = logging.getLogger(__name__)

# Test only: names a file holding a disk use in percent that the runner believes instead of
# the real one, so an integration test can fill and free the disk of a running daemon.
TEST_DISK_FILE = "ARCHIVER_TEST_DISK_USED_FILE"


@dataclass
class RunnerService:
    runner: Runner
    embedded: EmbeddedRedis | None

    def run(self, mode: str, live: bool = False) -> None:
        view = LiveView() if live else LogView()
        settle()
        try:
            self.runner.run(mode, view)
        finally:
            view.close()
            self.stop_redis_if_idle()

    def stop_redis_if_idle(self) -> None:
        """The embedded Redis stops with a clean exit only when no crawl keeps state in it."""
        if self.embedded is None:
            return
        try:
            keeps_state = Crawl.objects.active().exclude(redis_db=None).exists()
        except DatabaseError:
            keeps_state = True  # cannot tell: the safe side
        if keeps_state:
            log.info("leaving the embedded Redis running: crawls may keep their state in it")
            return
        self.embedded.stop()


def settle() -> None:
    """Freeze what start-up made out of the garbage collector's walk.

    The daemon's memory grew ~40 kB per finished crawl (issue 27, bench/daemon_memory.py):
    every redis-py client (a crawl's database, the Redis watch's pings) is a reference cycle
    that only a full collection frees, and full collections were rare: they wait until the
    oldest generation has grown by a quarter, and start-up leaves ~1.2*10^5 objects there
    (Django, pydantic, the launchers) that never die. Frozen, they are out of every walk, so
    the collection release_redis() (runner/ending.py) runs per finished crawl is cheap. The
    API's workers freeze the same way (archiver/wsgi.py).
    """
    gc.collect()
    gc.freeze()


def build_runner(settings: Settings) -> RunnerService:
    # The default data dir is relative ("data"): everything we hand to other processes
    # (redis-server's dir, crawler folders, container mounts) must be absolute.
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = acquire_runner_lock(settings)  # before touching the embedded Redis
    try:
        storage.link_local_archives(settings)
        endpoint, embedded = connect(settings)
        runner = Runner(settings, make_launcher(settings), ProgressStore(endpoint), lock_file=lock,
                        host_usage=simulated_disk(settings), redis_watch=RedisWatch(embedded, endpoint))
    except BaseException:
        lock.close()
        raise
    return RunnerService(runner, embedded)


def simulated_disk(settings: Settings, environ=os.environ) -> Callable[[], admission.HostUsage] | None:
    """The host usage with the disk use read from the file ARCHIVER_TEST_DISK_USED_FILE names
    (a test hook; None when unset). A missing or unreadable file means the real disk."""
    name = environ.get(TEST_DISK_FILE)
    if not name:
        return None
    path = Path(name)
    log.warning("%s is set: disk use is read from %s (a test hook, not for production)",
                TEST_DISK_FILE, path)

    def usage() -> admission.HostUsage:
        real = admission.read_host_usage(settings.data_dir)
        try:
            percent = min(max(float(path.read_text().strip()), 0.0), 100.0)
        except (OSError, ValueError):
            return real
        # The real disk's size, filled to `percent`: free space stays realistic, so rules
        # that need room to package a crawl see the room a disk that full would have.
        total = real.disk_used + real.disk_free
        used = round(total * percent / 100)
        return admission.HostUsage(disk_used=used, disk_free=total - used,
                                   memory_available=real.memory_available)

    return usage
