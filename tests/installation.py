"""An installation of archiver run as real processes: a data dir of its own (its SQLite
database and embedded Redis), `manage.py` commands against it, and the daemons started on it."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from tests.runner.helpers import stop_processes_of
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
# The admin's and the API's request limits and error worker, as scripts/start.sh starts
# gunicorn (tests/test_scripts_settings.py checks start.sh still says them).
GUNICORN_LIMITS = ("--worker-class", "archiver.gunicorn_worker.JsonErrorWorker",
                   "--limit-request-line", "8190", "--limit-request-field_size", "16380")
# A data dir that `migrate` and `collectstatic` ran in once per test process; installations copy
# its database and static files (seconds each, dozens of installations a run).
_template: Path | None = None


def template() -> Path:
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="atpl-", dir="/tmp"))
        atexit.register(shutil.rmtree, folder, True)
        made = Installation(folder)
        made.manage("migrate", "-v0")
        made.manage("collectstatic", "--noinput", "--clear", "-v0")
        _template = folder
    return _template


class Installation:
    """A data dir, the commands run against it, and every daemon started on it."""

    def __init__(self, data_dir: Path, launcher: str = "local"):
        self.data_dir = data_dir
        self.env = {**os.environ, "ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_LAUNCHER": launcher,
                    "ARCHIVER_POLL_INTERVAL": "0.2", "ARCHIVER_LEASE_SECONDS": "5",
                    "PYTHONUNBUFFERED": "1"}
        for name in ("ARCHIVER_REDIS_URL", "ARCHIVER_DATABASE_URL", "DJANGO_SETTINGS_MODULE"):
            self.env.pop(name, None)
        self.daemons: list[subprocess.Popen] = []
        self.logs = []

    def manage(self, *args: str) -> str:
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def migrate(self, static: bool = False) -> None:
        """As `manage.py migrate` (and `collectstatic`) would leave the data dir, copied from
        the process's template: SQLite's backup API copies a consistent database."""
        source = template()
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.data_dir / "archiver.sqlite3"
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        with sqlite3.connect(source / "archiver.sqlite3") as made, sqlite3.connect(target) as copy:
            made.backup(copy)
        made.close()
        copy.close()
        if static:
            shutil.copytree(source / "static", self.data_dir / "static")

    def start_daemon(self) -> subprocess.Popen:
        log = open(self.data_dir / f"daemon-{len(self.daemons)}.log", "w")  # noqa: SIM115
        self.logs.append(log)
        daemon = subprocess.Popen([sys.executable, "manage.py", "run", "--daemon", "--no-live"],
                                  cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.daemons.append(daemon)
        return daemon

    def query(self, sql: str, *params):
        with sqlite3.connect(self.data_dir / "archiver.sqlite3", timeout=30) as db:
            return db.execute(sql, params).fetchall()

    def crawl(self, crawl_id: str) -> dict:
        (row,) = self.query("SELECT status, pages_done, error, waiting_reason, size_bytes "
                            "FROM crawls_crawl WHERE id = ?", crawl_id)
        return dict(zip(("status", "pages_done", "error", "waiting_reason", "size_bytes"), row, strict=True))

    def flag_raised(self, crawl_id: str, flag: str) -> bool:
        """Whether the daemon has raised `flag` (paused, stopping, canceled) for the crawl's crawlers."""
        ((db,),) = self.query("SELECT redis_db FROM crawls_crawl WHERE id = ?", crawl_id)
        if db is None:
            return False
        state = json.loads((self.data_dir / "run" / "redis.json").read_text())
        with redis.Redis(host="127.0.0.1", port=state["port"], password=state["password"], db=db,
                         socket_timeout=10) as client:
            return client.exists(f"{crawl_id}:{flag}") == 1

    def files(self, crawl_id: str) -> list[tuple[Path, int]]:
        rows = self.query("SELECT path, size FROM crawls_crawlfile WHERE crawl_id = ? ORDER BY id", crawl_id)
        return [(self.data_dir / path, size) for path, size in rows]

    def stop_daemon(self, daemon: subprocess.Popen) -> int:
        daemon.send_signal(signal.SIGTERM)
        return daemon.wait(timeout=30)

    def wait(self, crawl_id: str, until, timeout: float = 120) -> dict:
        """The crawl's row once `until(row)` holds; on failure where it is stuck and the daemons' logs."""
        def reached() -> dict | None:
            state = self.crawl(crawl_id)
            return state if until(state) else None

        def stuck() -> str:
            logs = "\n".join(p.read_text()[-3000:] for p in sorted(self.data_dir.glob("daemon-*.log")))
            return f"stuck at {self.crawl(crawl_id)}\n{logs}"

        return wait_for(reached, timeout, 0.2, f"crawl {crawl_id}'s state", explain=stuck)

    def clean_up(self) -> None:
        for daemon in self.daemons:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        for log in self.logs:
            log.close()
        stop_processes_of(self.data_dir)  # the crawlers and the embedded Redis we started
