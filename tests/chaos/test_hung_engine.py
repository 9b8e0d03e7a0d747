"""A Docker engine that accepts connections and never answers (DOCKER_HOST on a silent socket)."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.chaos.harness import Trial, chaos_site

pytestmark = pytest.mark.slow
LEASE = 5.0


class SilentEngine:
    """A Unix socket that accepts every connection, reads nothing and answers nothing."""

    def __init__(self, path: Path):
        self.path = path
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(64)
        self.server.settimeout(0.2)
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="silent-engine", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self.accepted:
            conn.close()
        self.server.close()


def parse_time(value) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(str(value)).replace(tzinfo=dt.UTC)


def test_a_hung_engine_neither_stops_the_ticks_nor_lets_a_lease_expire(chaos_root):
    engine = SilentEngine(chaos_root / "engine.sock")
    try:
        with chaos_site(trees=1, pages=4) as site, \
                Trial(chaos_root, launcher="docker", webhooks=False,
                      env={"DOCKER_HOST": f"unix://{engine.path}",
                           "ARCHIVER_LEASE_SECONDS": str(int(LEASE))}) as trial:
            data_dir = trial.add_data_dir()
            trial.migrate()
            daemon = trial.start_daemon(data_dir)
            trial.daemon_ready(data_dir, timeout=LEASE * 3)
            crawl_id = trial.add(data_dir, site.tree_url(0))
            beats, expired, last_change, longest = None, [], time.monotonic(), 0.0
            watch_until = time.monotonic() + 25
            while time.monotonic() < watch_until:
                (beat,) = trial.db.query("SELECT heartbeat_at FROM crawls_runnerrecord "
                                         "WHERE pid = %s", daemon.pid)[0]
                if beat != beats:
                    beats, last_change = beat, time.monotonic()
                longest = max(longest, time.monotonic() - last_change)
                ((owner, retry_at, status),) = trial.db.query(
                    "SELECT lease_owner, retry_at, status FROM crawls_crawl WHERE id = %s", crawl_id)
                now = dt.datetime.now(dt.UTC)
                if owner and retry_at and parse_time(retry_at) < now - dt.timedelta(seconds=1):
                    expired.append((status, str(retry_at), now.isoformat()))
                time.sleep(0.2)
            alive = daemon.poll() is None
            trial.kill_daemon(data_dir)  # a SIGTERM could wait on the silent engine
    finally:
        engine.close()
    assert alive, trial.log_tail()
    assert longest <= LEASE, f"no tick for {longest:.1f} s (lease {LEASE:g} s)"
    assert expired == [], f"the crawl's lease expired while held: {expired[:3]}"
