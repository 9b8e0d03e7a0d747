"""Putting a runner together from settings: Redis (embedded or not), the launcher, the view."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from archiver.conf import Settings
from crawls.models import Crawl
from runner.daemon import Runner, acquire_runner_lock
from runner.launchers import make_launcher
from runner.live import LiveView, LogView
from runner.progress import ProgressStore
from runner.redis_server import EmbeddedRedis, connect

log = logging.getLogger(__name__)


@dataclass
class RunnerService:
    runner: Runner
    embedded: EmbeddedRedis | None

    def run(self, mode: str, live: bool = False) -> None:
        view = LiveView() if live else LogView()
        try:
            self.runner.run(mode, view)
        finally:
            view.close()
            self.stop_redis_if_idle()

    def stop_redis_if_idle(self) -> None:
        """The embedded Redis stops with a clean exit only when no crawl keeps state in it."""
        if self.embedded is None:
            return
        if Crawl.objects.active().exclude(redis_db=None).exists():
            log.info("leaving the embedded Redis running: crawls keep their state in it")
            return
        self.embedded.stop()

    def restart_redis(self) -> None:
        if self.embedded is not None:
            self.embedded.ensure()


def build_runner(settings: Settings) -> RunnerService:
    # The default data dir is relative ("data"): everything we hand to other processes
    # (redis-server's dir, crawler folders, container mounts) must be absolute.
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = acquire_runner_lock(settings)  # before touching the embedded Redis
    try:
        endpoint, embedded = connect(settings)
        runner = Runner(settings, make_launcher(settings), ProgressStore(endpoint), lock_file=lock)
    except BaseException:
        lock.close()
        raise
    service = RunnerService(runner, embedded)
    if embedded is not None:
        service.runner.on_redis_down = service.restart_redis
    return service
