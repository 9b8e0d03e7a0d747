"""A black-box chaos harness: real daemons, a real Redis, a logged site, kill -9, then an audit.

Used by tests/chaos/ and by bench/chaos.py. Nothing here imports archiver's code: the
daemons are `manage.py run --daemon --no-live` processes, crawls are added with the CLI, and
the verdict is read from the database (SQL), the data dirs and the kept WACZ files, so the
checks hold whatever shape the runner takes inside.

    with Trial(root, database_url=pg_url, redis=RedisServer.start(root / "redis")) as trial:
        a, b = trial.add_data_dir(), trial.add_data_dir()
        trial.migrate()
        with chaos_site(trees=30, pages=4) as site:
            trial.start_daemon(a); trial.start_daemon(b)
            ids = trial.add_many(a, [site.tree_url(k) for k in range(30)])
            ...
            trial.wait_final(ids, timeout=60)
            counts = trial.audit(site, ids)

`Trial.audit()` returns the counts bench/chaos.py prints (see COUNT_KEYS). Everything the
harness started (daemons, crawlers under its data dirs, embedded and private Redis servers,
containers of its installations, tmpfs mounts) is stopped in `close()`, by pid or label.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.ports import free_port
from tests.s3server import stop_process
from tests.sitegen import Response, html, serve_site
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

FINAL = ("complete", "stopped_by_user", "stopped_quota_reached", "stopped_time_limit",
         "stopped_size_limit", "stopped_page_limit", "stopped_pause_limit",
         "skipped_quota_reached", "failed", "canceled")
COUNT_KEYS = ("trials", "crawls", "incomplete", "crawled_twice", "pages_twice", "pages_missing",
              "archives_unrecorded", "wacz_invalid", "webhook_events_missing",
              "webhook_events_duplicated")
# Extra counts the audit reports next to the required ones (also summed by bench/chaos.py).
EXTRA_KEYS = ("files_missing", "pages_fetched_twice", "tracebacks")
TRACEBACK = "Traceback (most recent call last)"


# --- processes -------------------------------------------------------------------------


def _cmdline(pid: int) -> list[bytes] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return None if state == "Z" or not raw else raw.rstrip(b"\0").split(b"\0")


def pids() -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            yield int(entry.name)


def processes_mentioning(text: str) -> list[int]:
    """Live pids whose command line contains `text`."""
    needle = text.encode()
    return [pid for pid in pids() if (argv := _cmdline(pid)) and needle in b"\0".join(argv)]


def crawler_processes(crawl_id: str | None = None, under: Path | None = None) -> Counter[str]:
    """Live crawler processes per instance (their `--cwd`), wrappers left out: of one crawl,
    or of every crawl whose instance folder is `under` a data dir.

    The protocol fixes `--crawlId` and `--cwd` for every instance, so this holds for any
    launcher that runs crawlers as processes of this host (containers included).
    """
    found: Counter[str] = Counter()
    for pid in pids():
        argv = _cmdline(pid)
        if not argv or b"--crawlId" not in argv:
            continue
        if any(a == b"runner.local_wrapper" or a.endswith(b"/local_wrapper.py") for a in argv):
            continue
            continue
        args = [a.decode(errors="replace") for a in argv]
        found_id = args[args.index("--crawlId") + 1] if args[-1] != "--crawlId" else ""
        cwd = args[args.index("--cwd") + 1] if "--cwd" in args[:-1] else "?"
        if (crawl_id and found_id != crawl_id) or (under and not cwd.startswith(str(under))):
            continue
        found[f"{found_id[:8]} {cwd}"] += 1
    return found


def kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# --- Redis -----------------------------------------------------------------------------


@dataclass
class RedisServer:
    """A private redis-server (append-only, fsync always) that can be killed and restarted
    on the same port with its data, as a production Redis with persistence would be."""

    port: int
    folder: Path
    databases: int = 64
    process: subprocess.Popen | None = None
    kills: int = 0

    @classmethod
    def start(cls, folder: Path, databases: int = 64) -> RedisServer:
        folder.mkdir(parents=True, exist_ok=True)
        server = cls(port=free_port(), folder=folder, databases=databases)
        server.restart()
        return server

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def restart(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH (scripts/test.sh installs it)")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--databases", str(self.databases),
             "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.answers, 60, 0.05, "redis-server answering")

    def answers(self) -> bool:
        try:
            return self.client().ping()
        except OSError:
            return False
        except RuntimeError as exc:  # an error reply: LOADING the dataset after a restart
            if str(exc).startswith("LOADING"):
                return False
            raise

    def client(self, db: int = 0):
        return RedisClient(self.port, db)

    def kill9(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
            self.kills += 1

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)

    def find_db(self, key: str) -> int | None:
        """The database holding `key` (the harness does not know how the runner allocates)."""
        for db in range(self.databases):
            if self.client(db).call("EXISTS", key) == 1:
                return db
        return None


class RedisClient:
    """A few RESP commands over a fresh socket: no client library state to leak or reuse."""

    def __init__(self, port: int, db: int = 0, password: str | None = None):
        self.port, self.db, self.password = port, db, password

    def ping(self) -> bool:
        return self.call("PING") == "PONG"

    def call(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=3) as sock:
            stream = sock.makefile("rwb")
            prelude = ([("AUTH", self.password)] if self.password else []) + [("SELECT", str(self.db))]
            for command in [*prelude, args]:
                stream.write(_resp(command))
            stream.flush()
            for _ in prelude:
                _read_reply(stream)
            reply = _read_reply(stream)
            stream.close()
            return reply


def _resp(args: Iterable) -> bytes:
    parts = [str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _read_reply(stream):
    line = stream.readline()
    if not line:
        raise ConnectionError("Redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        return None if int(rest) < 0 else stream.read(int(rest) + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        return [] if int(rest) < 0 else [_read_reply(stream) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected Redis reply {line!r}")


# --- the site --------------------------------------------------------------------------


def tree_routes(prefix: str, pages: int, fanout: int = 3, body_bytes: int = 0,
                delay: float = 0.0) -> dict[str, Response]:
    """`prefix` and pages p1..pN under it in a tree of `fanout`, each linking its children and
    home. `body_bytes` of incompressible text per page make archives big on purpose."""
    routes = {}
    for i in range(pages + 1):
        children = [f"{prefix}p{c}.html" for c in range(i * fanout + 1, i * fanout + fanout + 1)
                    if c <= pages]
        body = html(f"{prefix} page {i}", [*children, prefix])
        if body_bytes:
            noise = base64.b64encode(os.urandom(body_bytes * 3 // 4)).decode()
            body = body.replace(b"</body>", f"<pre>{noise}</pre></body>".encode())
        routes[prefix if i == 0 else f"{prefix}p{i}.html"] = Response(body=body, delay=delay)
    return routes


class ChaosSite:
    """The sitegen server plus numbered trees (/t0/, /t1/ ...), one per crawl, and a log of
    every request (path, monotonic time) so fetches can be told apart per crawl."""

    def __init__(self, site, trees: dict[int, set[str]]):
        self.site = site
        self.trees = trees
        self.log: list[tuple[str, float]] = []

    @property
    def root(self) -> str:
        return self.site.root

    def tree_url(self, k: int) -> str:
        return f"{self.site.root}/t{k}/"

    def tree_pages(self, k: int) -> set[str]:
        return {self.site.root + path for path in self.trees[k]}

    def fetches(self, k: int) -> Counter[str]:
        return Counter(path for path, _ in list(self.log) if path in self.trees[k])

    def tree_of(self, url: str) -> int | None:
        match = re.match(re.escape(self.site.root) + r"/t(\d+)/", url)
        return int(match.group(1)) if match else None

    def set_delay(self, delay: float) -> None:
        for paths in self.trees.values():
            for path in paths:
                self.site.routes[path].delay = delay


@contextlib.contextmanager
def chaos_site(trees: int = 1, pages: int = 5, fanout: int = 3, body_bytes: int = 0,
               delay: float = 0.0) -> Iterator[ChaosSite]:
    with serve_site() as site:
        paths: dict[int, set[str]] = {}
        for k in range(trees):
            routes = tree_routes(f"/t{k}/", pages, fanout, body_bytes, delay)
            site.routes.update(routes)
            paths[k] = set(routes)
        chaos = ChaosSite(site, paths)
        counted = site.count

        def count(path: str, agent: str) -> None:
            chaos.log.append((path, time.monotonic()))  # list.append is atomic
            counted(path, agent)

        site.count = count  # the handler calls site.count for every request
        yield chaos


# --- webhooks --------------------------------------------------------------------------


class WebhookReceiver:
    """An HTTP receiver on 127.0.0.1 that answers 200 and keeps every event id it got."""

    def __init__(self):
        self.received: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                event_id = self.headers.get("X-Archiver-Event-Id", "")
                with contextlib.suppress(ValueError):
                    event_id = event_id or json.loads(body).get("event_id", "")
                receiver.received.append(event_id)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="chaos-hooks",
                                       daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


# --- the database ----------------------------------------------------------------------


class Database:
    """SQL against the trial's database (write queries with %s placeholders)."""

    def __init__(self, url: str):
        self.url = url

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite:")

    def query(self, sql: str, *params) -> list[tuple]:
        if self.is_sqlite:
            db = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=30)
            try:
                rows = db.execute(sql.replace("%s", "?"), params).fetchall()
                db.commit()
                return rows
            finally:
                db.close()
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as db:
            cursor = db.execute(sql, params)
            return cursor.fetchall() if cursor.description else []


# --- a trial ---------------------------------------------------------------------------


class SharedBucket:
    """One bucket of an S3-compatible server (moto's, a real process on 127.0.0.1) that
    every data dir of a trial keeps its archives in (docs/storage.md)."""

    def __init__(self, root: Path):
        from tests.s3server import MotoServer, client_for, new_bucket, storage_env

        root.mkdir(parents=True, exist_ok=True)
        self.server = MotoServer(root / "moto.log")
        self.name = new_bucket(self.server.url)
        self.env = storage_env(self.server.url, self.name)
        self.client = client_for(self.server.url)

    def object_keys(self) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name)
        return [item["Key"] for page in pages for item in page.get("Contents", ())]

    def fetch(self, key: str, folder: Path) -> Path | None:
        """A local copy of object `key` (None when there is no such object)."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / key.replace("/", "_")
        try:
            self.client.download_file(self.name, key, str(path))
        except Exception:  # noqa: BLE001 - botocore's errors: the object is not there
            return None
        return path

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


@dataclass
class DataDir:
    name: str
    path: Path
    env: dict[str, str]
    daemons: list[subprocess.Popen] = field(default_factory=list)
    # Its host "died" (kill_crawlers): what is on its disk went with it in truth, so a WACZ
    # there that no row records is no lost archive (its pages were queued again).
    host_dead: bool = False

    @property
    def daemon(self) -> subprocess.Popen | None:
        return self.daemons[-1] if self.daemons else None

    def embedded_redis(self) -> dict | None:
        state = self.path / "run" / "redis.json"
        try:
            return json.loads(state.read_text())
        except (OSError, ValueError):
            return None


class Trial:
    """Data dirs sharing one database (PostgreSQL URL, or one SQLite file) and optionally
    one Redis server; daemons started, killed and restarted on them; an audit at the end."""

    def __init__(self, root: Path, *, database_url: str | None = None,
                 redis: RedisServer | None = None, launcher: str = "local",
                 env: dict[str, str] | None = None, webhooks: bool = True,
                 storage: SharedBucket | None = None):
        self.root = root
        self.storage = storage
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        self.database_url = database_url or f"sqlite:///{self.root / 'archiver.sqlite3'}"
        self.db = Database(self.database_url)
        self.redis = redis
        self.launcher = launcher
        self.extra_env = env or {}
        self.data_dirs: list[DataDir] = []
        self.logs: list[Path] = []
        self._log_files: list = []
        self.mounts: list[Path] = []
        self.hooks = WebhookReceiver() if webhooks else None
        self.events: list[tuple[float, str]] = []  # what the chaos did, for reports

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    # set-up

    def add_data_dir(self, path: Path | None = None) -> DataDir:
        name = f"d{len(self.data_dirs)}"
        path = path or self.root / name
        path.mkdir(parents=True, exist_ok=True)
        # ARCHIVER_CHROMIUM too: the trials' crawls are HTTP crawls, as the suite's are
        # (tests/conftest.py), unless a trial asks for the browser in extra_env.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ARCHIVER_") or k in ("ARCHIVER_CRAWLER_IMAGE", "ARCHIVER_CHROMIUM")}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.update({
            "ARCHIVER_DATA_DIR": str(path), "ARCHIVER_DATABASE_URL": self.database_url,
            "ARCHIVER_LAUNCHER": self.launcher, "ARCHIVER_POLL_INTERVAL": "0.2",
            "ARCHIVER_LEASE_SECONDS": "5", "ARCHIVER_INSTANCE_ID": f"chaos-{name}",
            # The sites are on 127.0.0.1, which the crawl address policy refuses by default.
            "ARCHIVER_CRAWL_ALLOW_NETWORKS": "127.0.0.0/8",
            # The site's trees stand for many sites: no budget per host unless a trial asks.
            "ARCHIVER_HOST_RATE": "0",
            "PYTHONUNBUFFERED": "1",
        })
        if self.redis:
            env["ARCHIVER_REDIS_URL"] = self.redis.url
        if self.hooks:
            env["ARCHIVER_WEBHOOK_ALLOW_HOSTS"] = self.hooks.host
        if self.storage:
            env.update(self.storage.env)
        env.update(self.extra_env)
        data_dir = DataDir(name, path, env)
        self.data_dirs.append(data_dir)
        return data_dir

    def mount_tmpfs(self, path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       check=True, capture_output=True)
        self.mounts.append(path)

    def resize_tmpfs(self, path: Path, size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True,
                       capture_output=True)

    def manage(self, data_dir: DataDir, *args: str, check: bool = True,
               timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=data_dir.env,
                                capture_output=True, text=True, timeout=timeout, input=stdin)
        if check and result.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)} exited {result.returncode}: "
                                 f"{result.stderr[-2000:]}")
        return result

    def migrate(self) -> None:
        """Migrate once (the database is shared) and register the webhook receiver."""
        first = self.data_dirs[0]
        self.manage(first, "migrate", "-v0")
        if self.hooks:
            self.manage(first, "webhook", "add", self.hooks.url, "--secret-file", "-", stdin=secrets.token_hex(16))

    # daemons

    def start_daemon(self, data_dir: DataDir) -> subprocess.Popen:
        log_path = self.root / "logs" / f"{data_dir.name}-daemon-{len(data_dir.daemons)}.log"
        log = open(log_path, "w")  # noqa: SIM115 - closed in close()
        self._log_files.append(log)
        self.logs.append(log_path)
        daemon = subprocess.Popen([sys.executable, "manage.py", "run", "--daemon", "--no-live"],
                                  cwd=ROOT, env=data_dir.env, stdout=log, stderr=subprocess.STDOUT)
        data_dir.daemons.append(daemon)
        self.note(f"start {data_dir.name} daemon pid {daemon.pid}")
        return daemon

    def kill_daemon(self, data_dir: DataDir) -> None:
        daemon = data_dir.daemon
        if daemon and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
            self.note(f"kill -9 {data_dir.name} daemon pid {daemon.pid}")

    def kill_crawlers(self, data_dir: DataDir) -> int:
        """kill -9 every crawler (and wrapper) working in this data dir: its host went."""
        killed: set[int] = set()
        # Again until none is left: a wrapper may have forked its crawler after the listing.
        while pids := set(processes_mentioning(str(data_dir.path))) - killed:
            for pid in pids:
                kill9(pid)
            killed |= pids
        data_dir.host_dead = True
        self.note(f"kill -9 {len(killed)} crawler processes of {data_dir.name}")
        return len(killed)

    def held_by(self, data_dir: DataDir) -> int:
        """How many crawls the data dir's daemon holds (by its runner row's id)."""
        return self.db.query(
            "SELECT count(*) FROM crawls_crawl c JOIN crawls_runnerrecord r ON c.lease_owner = r.id "
            "WHERE r.pid = %s AND r.stopped_at IS NULL", data_dir.daemon.pid)[0][0]

    def adopted(self, data_dir: DataDir) -> int:
        """Crawls the data dir's daemons adopted from a dead runner (their log lines)."""
        return sum(p.read_text(errors="replace").count("whose runner is gone")
                   for p in self.logs if p.name.startswith(f"{data_dir.name}-"))

    def stop_daemon(self, data_dir: DataDir, timeout: float = 30) -> int | None:
        daemon = data_dir.daemon
        if daemon is None or daemon.poll() is not None:
            return daemon.returncode if daemon else None
        daemon.send_signal(signal.SIGTERM)
        try:
            return daemon.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
            return None

    def daemon_ready(self, data_dir: DataDir, timeout: float = 30) -> None:
        """Wait until the data dir's daemon registered itself (a runner row of its pid)."""
        pid = data_dir.daemon.pid

        def registered() -> bool:
            if data_dir.daemon.poll() is not None:
                raise AssertionError(f"daemon exited {data_dir.daemon.returncode}:\n{self.log_tail()}")
            try:
                return bool(self.db.query("SELECT 1 FROM crawls_runnerrecord WHERE pid = %s "
                                          "AND stopped_at IS NULL", pid))
            except Exception:  # noqa: BLE001 - a database not migrated yet is "not yet"
                return False

        wait_for(registered, timeout, 0.1, f"{data_dir.name} daemon registered")

    # crawls

    def add(self, data_dir: DataDir, url: str, *options: str) -> str:
        return self.manage(data_dir, "add", url, *options).stdout.strip()

    def add_many(self, data_dir: DataDir, urls: list[str], *options: str) -> list[str]:
        """Add one crawl per URL with the `add` command, in one process (30 Django start-ups
        would take longer than the crawls)."""
        code = ("import io, sys\nfrom django.core.management import call_command\n"
                f"for url in {urls!r}:\n    out = io.StringIO()\n"
                f"    call_command('add', url, *{list(options)!r}, stdout=out)\n"
                "    print(out.getvalue().strip(), flush=True)\n")
        out = self.manage(data_dir, "shell", "-c", code).stdout.split()
        ids = [word for word in out if re.fullmatch(r"[0-9a-f]{32}", word)]
        assert len(ids) == len(urls), ids
        return ids

    def crawl(self, crawl_id: str) -> dict:
        rows = self.db.query("SELECT status, pages_done, error, waiting_reason, size_bytes "
                             "FROM crawls_crawl WHERE id = %s", crawl_id)
        if not rows:
            raise AssertionError(f"no crawl {crawl_id}")
        return dict(zip(("status", "pages_done", "error", "waiting_reason", "size_bytes"),
                        rows[0], strict=True))

    def statuses(self, ids: Iterable[str]) -> dict[str, str]:
        wanted = set(ids)
        return {k: v for k, v in self.db.query("SELECT id, status FROM crawls_crawl") if k in wanted}

    def wait_crawl(self, crawl_id: str, until: Callable[[dict], bool], timeout: float) -> dict:
        state: dict = {}

        def reached() -> bool:
            nonlocal state
            state = self.crawl(crawl_id)
            return until(state)

        try:
            wait_for(reached, timeout, 0.2, f"crawl {crawl_id[:8]}")
        except AssertionError as exc:
            raise AssertionError(f"crawl {crawl_id[:8]} stuck at {state}\n{self.log_tail()}") from exc
        return state

    def wait_final(self, ids: list[str], timeout: float) -> dict[str, str]:
        """Wait until every crawl is final or `timeout` passes; the statuses either way."""
        deadline = time.monotonic() + timeout
        while True:
            statuses = self.statuses(ids)
            if all(statuses.get(i) in FINAL for i in ids) or time.monotonic() > deadline:
                return statuses
            time.sleep(0.3)

    def wait_webhooks(self, timeout: float = 20) -> None:
        """Wait until every recorded event was received (or `timeout`)."""
        if not self.hooks:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            recorded = {str(r[0]).replace("-", "") for r in
                        self.db.query("SELECT event_id FROM crawls_crawlevent")}
            got = {e.replace("-", "") for e in self.hooks.received}
            if recorded <= got:
                return
            time.sleep(0.3)

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
                         for p in self.logs if p.exists())

    def tracebacks(self) -> int:
        return sum(p.read_text(errors="replace").count(TRACEBACK) for p in self.logs if p.exists())

    # the audit

    def kept_files(self, ids: Iterable[str]) -> dict[str, list[Path | None]]:
        """Each crawl's CrawlFile rows, resolved in whichever data dir holds them (a copy of
        the object, for a file recorded in the bucket)."""
        wanted = set(ids)
        kept: dict[str, list[Path | None]] = {i: [] for i in wanted}
        for crawl_id, path, root in self.db.query("SELECT crawl_id, path, root FROM crawls_crawlfile"):
            if crawl_id not in wanted:
                continue
            if root.startswith("s3://"):
                found = self.storage.fetch(path, self.root / "fetched") if self.storage else None
                kept[crawl_id].append(found)
            else:
                kept[crawl_id].append(self.resolve(path))
        return kept

    def resolve(self, path: str) -> Path | None:
        candidates = [Path(path)] if Path(path).is_absolute() else [
            d.path / path for d in self.data_dirs]
        return next((c for c in candidates if c.is_file()), None)

    def unrecorded_archives(self) -> list[Path]:
        """WACZ files (and objects) that no row records. With a bucket, a session's local
        WACZ whose upload is recorded (same SHA-256) is a copy, not a lost archive: only a
        runner deletes those, and a dead one cannot."""
        rows = self.db.query("SELECT path, sha256 FROM crawls_crawlfile")
        recorded = {path for path, _ in rows}
        uploaded = {digest for path, digest in rows} if self.storage else set()
        loose = []
        for data_dir in self.data_dirs:
            if data_dir.host_dead:
                continue
            for wacz in data_dir.path.rglob("*.wacz"):
                if str(wacz.relative_to(data_dir.path)) not in recorded and str(wacz) not in recorded \
                        and hashlib.sha256(wacz.read_bytes()).hexdigest() not in uploaded:
                    loose.append(wacz)
        if self.storage:  # an object no row records is as lost as a loose file
            loose += [Path(f"s3://{self.storage.name}/{key}") for key in self.storage.object_keys()
                      if key not in recorded]
        return loose

    def audit(self, site: ChaosSite, ids: list[str], trees: dict[str, int] | None = None,
              require: str = "complete", webhook_wait: float = 20) -> dict:
        """The counts of COUNT_KEYS and EXTRA_KEYS for these crawls; `trees` maps a crawl id
        to its site tree (default: the tree its seed names)."""
        self.wait_webhooks(webhook_wait)
        statuses = self.statuses(ids)
        seeds = dict(self.db.query("SELECT id, seeds FROM crawls_crawl"))
        kept = self.kept_files(ids)
        counts = Counter({key: 0 for key in (*COUNT_KEYS, *EXTRA_KEYS)})
        counts["trials"], counts["crawls"] = 1, len(ids)
        details: dict[str, list] = {"incomplete": [], "pages_twice": [], "pages_missing": [],
                                    "wacz_invalid": [], "pages_fetched_twice": []}
        for crawl_id in ids:
            if statuses.get(crawl_id) != require:
                counts["incomplete"] += 1
                details["incomplete"].append((crawl_id[:8], statuses.get(crawl_id)))
            files = kept[crawl_id]
            counts["files_missing"] += sum(1 for f in files if f is None)
            responses: Counter[str] = Counter()
            for path in (f for f in files if f is not None):
                if path.name.endswith((".warc.gz", ".warc")):  # left unpackaged, kept as it was
                    responses.update(warc_responses(path))
                    continue
                problem = wacz_problem(path)
                if problem:
                    counts["wacz_invalid"] += 1
                    details["wacz_invalid"].append((path.name, problem))
                responses.update(wacz_responses(path))
            tree = (trees or {}).get(crawl_id)
            if tree is None:
                seed = json.loads(seeds[crawl_id])[0] if isinstance(seeds[crawl_id], str) \
                    else seeds[crawl_id][0]
                tree = site.tree_of(seed)
            pages = site.tree_pages(tree) if tree is not None else set()
            twice = sorted(url for url in pages if responses[url] > 1)
            missing = sorted(pages - set(responses))
            counts["pages_twice"] += len(twice)
            counts["crawled_twice"] += bool(twice)
            counts["pages_missing"] += len(missing)
            if twice:
                details["pages_twice"].append((crawl_id[:8], twice[:3]))
            if missing:
                details["pages_missing"].append((crawl_id[:8], len(missing), missing[:3]))
            if tree is not None:
                refetched = sorted(p for p, n in site.fetches(tree).items() if n > 1)
                counts["pages_fetched_twice"] += len(refetched)
                if refetched:
                    details["pages_fetched_twice"].append((crawl_id[:8], refetched[:3]))
        loose = self.unrecorded_archives()
        counts["archives_unrecorded"] = len(loose)
        details["archives_unrecorded"] = [str(p) for p in loose[:5]]
        if self.hooks:
            wanted = set(ids)
            recorded = Counter(str(event).replace("-", "") for event, crawl_id in self.db.query(
                "SELECT event_id, crawl_id FROM crawls_crawlevent") if crawl_id in wanted)
            got = Counter(e.replace("-", "") for e in self.hooks.received)
            missing_events = [e for e in recorded if e not in got]
            counts["webhook_events_missing"] = len(missing_events)
            if missing_events:
                details["webhook_events_missing"] = self.undelivered(missing_events[:5])
            counts["webhook_events_duplicated"] = sum(got[e] - 1 for e in recorded if got[e] > 1)
        counts["tracebacks"] = self.tracebacks()
        result = dict(counts)
        result["details"] = {k: v for k, v in details.items() if v}
        return result

    def undelivered(self, event_ids: list[str]) -> list[tuple]:
        """What became of events nobody received: (name, crawl, delivery status, attempts,
        last error), so a missing event says whether it was never queued, is still pending,
        or was given up on."""
        rows = self.db.query(
            "SELECT e.event_id, e.name, e.crawl_id, d.status, d.attempts, d.last_error "
            "FROM crawls_crawlevent e LEFT JOIN crawls_webhookdelivery d ON d.event_id = e.id")
        wanted = set(event_ids)
        return [(name, str(crawl)[:8], status or "no delivery row", attempts, (error or "")[:80])
                for event, name, crawl, status, attempts, error in rows
                if str(event).replace("-", "") in wanted]

    # clean-up

    def close(self) -> None:
        for data_dir in self.data_dirs:
            for daemon in data_dir.daemons:
                if daemon.poll() is None:
                    daemon.send_signal(signal.SIGTERM)
            for daemon in data_dir.daemons:
                try:
                    daemon.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        for data_dir in self.data_dirs:
            for pid in processes_mentioning(str(data_dir.path)):  # crawlers and wrappers we caused
                kill9(pid)
            state = data_dir.embedded_redis()
            if state:
                for pid in processes_mentioning(f"redis-server 127.0.0.1:{state['port']}"):
                    kill9(pid)
        remove_containers([d.path for d in self.data_dirs])
        for log in self._log_files:
            log.close()
        if self.hooks:
            self.hooks.close()
        for mount in self.mounts:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def install_label(data_dir: Path) -> str:
    # The same hash runner.launchers.install_id gives; containers are also matched by mount.
    return hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]


def remove_containers(data_dirs: list[Path]) -> int:
    """Remove containers labelled with (or mounting) these data dirs' installs."""
    if not data_dirs:
        return 0
    try:
        client = engine_client(10)
    except Exception:  # noqa: BLE001 - no engine, nothing of ours can run there
        return 0
    removed = 0
    try:
        labels = {install_label(d) for d in data_dirs}
        for container in client.containers.list(all=True, filters={"label": "archiver.install"}):
            mounts = [m.get("Source", "") for m in container.attrs.get("Mounts", [])]
            ours = container.labels.get("archiver.install") in labels or any(
                m.startswith(str(d)) for m in mounts for d in data_dirs)
            if ours:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                    removed += 1
    except Exception:  # noqa: BLE001 - an engine that went away: nothing more to remove
        pass
    finally:
        client.close()
    return removed


def engine_client(timeout: float):
    """A client of the engine DOCKER_HOST names, which answered a ping. The docker package
    leaves its socket open when a Unix socket refuses the connection (a ResourceWarning that
    failed a lone test without an engine), so that socket is tried here first."""
    import docker

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(timeout)
            probe.connect(host.removeprefix("unix://"))
    client = docker.DockerClient.from_env(timeout=timeout, version="1.41")
    try:
        client.ping()
    except Exception:
        client.close()
        raise
    return client


def docker_ready() -> str | None:
    """None when an engine answers and has the crawler image; else why not."""
    try:
        client = engine_client(5)
    except Exception as exc:  # noqa: BLE001
        return f"no Docker engine ({type(exc).__name__})"
    try:
        client.ping()
        image = os.environ.get("ARCHIVER_CRAWLER_IMAGE", "archiver/crawler:0.1.0")
        client.images.get(image)
    except Exception as exc:  # noqa: BLE001
        return f"Docker engine or crawler image unavailable ({type(exc).__name__})"
    finally:
        client.close()
    return None


# --- WACZ checks -----------------------------------------------------------------------


def warc_responses(path: Path) -> list[str]:
    """The target URI of every response record of a WARC file."""
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as stream:
        return [record.rec_headers.get_header("WARC-Target-URI")
                for record in ArchiveIterator(stream) if record.rec_type == "response"]


def wacz_responses(path: Path) -> list[str]:
    """The target URI of every response record in the WARCs a WACZ holds."""
    from warcio.archiveiterator import ArchiveIterator

    urls = []
    with zipfile.ZipFile(path) as wacz:
        for name in wacz.namelist():
            if name.startswith("archive/") and ".warc" in name:
                with wacz.open(name) as stream:
                    urls += [record.rec_headers.get_header("WARC-Target-URI")
                             for record in ArchiveIterator(stream) if record.rec_type == "response"]
    return urls


def wacz_members(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as wacz:
        return wacz.namelist()


def wacz_problem(path: Path) -> str | None:
    """Why this WACZ is invalid (zip, datapackage.json, CDXJ, pages), or None."""
    try:
        with zipfile.ZipFile(path) as wacz:
            bad = wacz.testzip()
            if bad:
                return f"bad CRC in {bad}"
            names = set(wacz.namelist())
            if "datapackage.json" not in names:
                return "no datapackage.json"
            package = json.loads(wacz.read("datapackage.json"))
            for resource in package.get("resources", []):
                member = resource.get("path")
                if member not in names:
                    return f"datapackage names missing {member}"
                digest = str(resource.get("hash", ""))
                if digest.startswith("sha256:") and hashlib.sha256(
                        wacz.read(member)).hexdigest() != digest.split(":", 1)[1]:
                    return f"hash of {member} differs from datapackage.json"
            indexes = [n for n in names if n.startswith("indexes/") and n.endswith(".cdxj")]
            if not indexes:
                return "no indexes/*.cdxj"
            warcs = {n.split("/", 1)[1] for n in names if n.startswith("archive/")}
            for index in indexes:
                for line in wacz.read(index).decode().splitlines():
                    if not line.strip():
                        continue
                    entry = json.loads(line.split(" ", 2)[2])
                    if entry.get("filename") not in warcs:
                        return f"CDXJ names a WARC not in archive/: {entry.get('filename')}"
            if not any(n.startswith("pages/") and n.endswith(".jsonl") for n in names):
                return "no pages/*.jsonl"
    except (zipfile.BadZipFile, ValueError, KeyError, IndexError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    tool = VENV_BIN / "wacz"
    if tool.exists():
        done = subprocess.run([str(tool), "validate", "-f", str(path)], capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            return f"wacz validate: {(done.stdout + done.stderr).strip()[-200:]}"
    return None


# --- chaos ------------------------------------------------------------------------------


def random_kills(trial: Trial, data_dir: DataDir, rng: random.Random, until: Callable[[], bool],
                 first_within: float = 3.0, downtime: tuple[float, float] = (0.0, 2.0),
                 gap: tuple[float, float] = (2.0, 8.0), max_kills: int = 3) -> int:
    """kill -9 the data dir's daemon at random times (the first within `first_within` s),
    restart it after a random downtime; stop once `until()` holds. Returns the kill count."""
    kills = 0
    wait = rng.uniform(0, first_within)
    while kills < max_kills:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if until():
                return kills
            time.sleep(0.05)
        trial.kill_daemon(data_dir)
        kills += 1
        time.sleep(rng.uniform(*downtime))
        trial.start_daemon(data_dir)
        wait = rng.uniform(*gap)
    return kills


class LaunchSniper:
    """kill -9 a data dir's daemon in the middle of a local launch: after the crawler is
    spawned, before the daemon has recorded it. Start it before the `add` it should hit.

    The window is a few milliseconds wide, too narrow to hit by timing alone, so (SQLite
    only) the sniper holds the database's write lock from the moment the crawl's folder
    appears, as any other writer (the admin, a CLI command) may: a daemon that records the
    launch after spawning it is stuck right there; one that records it first is stuck
    before spawning, which is fine too. Once a process naming the crawl's folder runs (or
    after `wait` s) the daemon is killed and the lock released. `in_window` then says
    whether the crawl's newest Process row had no pid at the kill."""

    def __init__(self, trial: Trial, data_dir: DataDir, wait: float = 3.0, timeout: float = 30):
        self.trial, self.data_dir, self.wait, self.timeout = trial, data_dir, wait, timeout
        self.crawls = data_dir.path / "crawls"
        self.before = set(self._list(self.crawls))
        self.caught: str | None = None
        self.spawned = False
        self.in_window: bool | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-sniper", daemon=True)

    @staticmethod
    def _list(folder: Path) -> list[str]:
        try:
            return os.listdir(folder)
        except OSError:
            return []

    def __enter__(self) -> LaunchSniper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._thread.join(timeout=self.timeout + self.wait + 5)

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        new: list[str] = []
        while not new and time.monotonic() < deadline:
            new = [name for name in self._list(self.crawls) if name not in self.before]
        if not new:
            return
        self.caught = new[0]
        lock = self._lock()
        try:
            folder = str(self.crawls / new[0])
            until = time.monotonic() + self.wait
            while not self.spawned and time.monotonic() < until:
                self.spawned = bool(processes_mentioning(folder))
                time.sleep(0.01)
            self.trial.kill_daemon(self.data_dir)
            rows = self.trial.db.query("SELECT pid FROM crawls_process WHERE crawl_id = %s "
                                       "ORDER BY id DESC", new[0])
            self.in_window = self.spawned and bool(rows) and rows[0][0] is None
        finally:
            if lock is not None:
                lock.rollback()
                lock.close()

    def _lock(self) -> sqlite3.Connection | None:
        if not self.trial.db.is_sqlite:
            return None
        lock = sqlite3.connect(self.trial.db.url.removeprefix("sqlite:///"), timeout=30,
                               isolation_level=None, check_same_thread=False)
        lock.execute("BEGIN IMMEDIATE")
        return lock


class CrawlerWatch:
    """Samples /proc every `every` s: the most crawler processes seen at once per instance."""

    def __init__(self, under: Path, every: float = 0.05):
        self.under = under
        self.every = every
        self.most: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-watch", daemon=True)

    def __enter__(self) -> CrawlerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for instance, n in crawler_processes(under=self.under).items():
                self.most[instance] = max(self.most[instance], n)
            self._stop.wait(self.every)

    def doubled(self) -> dict[str, int]:
        return {instance: n for instance, n in self.most.items() if n > 1}
