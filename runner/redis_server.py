"""The Redis server crawls report to: an embedded `redis-server` the runner owns, or ARCHIVER_REDIS_URL.

The embedded server listens on 127.0.0.1 (ARCHIVER_REDIS_BIND: other addresses, for
crawlers on other hosts) on a port chosen once and kept in
<data_dir>/run/redis.json (mode 0600, with its pid and password), persists with an
append-only file in <data_dir>/redis/ and runs in its own session: running crawlers need
it, so it must survive a daemon crash. A restarted daemon reuses it when it answers, or
starts it again on the same port, and the AOF brings the crawls' state back.

`RedisWatch` keeps it alive while the daemon runs: it pings every few seconds, restarts
the embedded server when it does not answer (whether or not crawls run), empties its
database 0 (a crawler's only way around its budget), and tells the daemon when the store
must reconnect (new port or password) and grant the crawls' ACL users again (the server
restarted, which loses them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from archiver.conf import Settings
from archiver.errors import ConfigError
from archiver.private_files import write_private
from runner import host_keys

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
START_TIMEOUT = 10.0
WATCH_INTERVAL = 2.0  # seconds between two pings of the watch
MAX_RESTART_BACKOFF = 60.0  # seconds between two attempts to start a server that will not start
MIN_DATABASES = 256
PAUSED_PER_RUNNING = 3  # paused crawls keep their database without counting as running


@dataclass(frozen=True)
class RedisEndpoint:
    """Where Redis is and how to log in; `url()` never goes into a log (it holds the password)."""

    host: str
    port: int
    password: str = ""
    username: str = ""
    databases: int = 16
    scheme: str = "redis"

    def url(self, db: int, host: str | None = None) -> str:
        auth = ""
        if self.password:
            auth = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}@"
        return f"{self.scheme}://{auth}{host or self.host}:{self.port}/{db}"

    def masked_url(self, db: int, host: str | None = None) -> str:
        auth = f"{self.username}:***@" if self.password else ""
        return f"{self.scheme}://{auth}{host or self.host}:{self.port}/{db}"

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK

    def client(self, db: int = 0, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, db=db, password=self.password or None,
                           username=self.username or None, socket_timeout=timeout,
                           socket_connect_timeout=timeout, decode_responses=True,
                           # One quick retry (a dropped idle connection), no backoff: a Redis
                           # that is down must not slow the whole tick down.
                           retry=Retry(NoBackoff(), 1),
                           ssl=self.scheme == "rediss", redis_connect_func=admin_connect)


def admin_connect(connection) -> None:
    """Log in, then ask that Redis never drop this connection to bound its clients' memory
    (`maxmemory-clients`): a crawler's connections holding the most go, the runner's stay."""
    connection.on_connect()
    connection.send_command("CLIENT", "NO-EVICT", "on")
    # Refused to a crawl's user (its connections are the ones to drop), unknown before Redis 7
    # (which drops no client for memory).
    with contextlib.suppress(redis.ResponseError):
        connection.read_response()


def mask(text: str, endpoint: RedisEndpoint) -> str:
    """`text` with the Redis password replaced, for args stored in the database and logs."""
    if not endpoint.password:
        return text
    return text.replace(quote(endpoint.password, safe=""), "***").replace(endpoint.password, "***")


def parse_url(url: str) -> RedisEndpoint:
    """The endpoint ARCHIVER_REDIS_URL names (no request made)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        raise ConfigError("ARCHIVER_REDIS_URL: crawlers need a TCP address, not a unix socket")
    return RedisEndpoint(
        host=parts.hostname or "127.0.0.1", port=parts.port or 6379,
        password=unquote(parts.password or ""), username=unquote(parts.username or ""),
        scheme=parts.scheme,
    )


def external(url: str) -> RedisEndpoint:
    """The server ARCHIVER_REDIS_URL names, with its number of databases (16 if it won't say)."""
    endpoint = parse_url(url)
    databases = 16
    try:
        answer = endpoint.client().config_get("databases")
        databases = int(answer.get("databases", 16))
    except redis.ResponseError:
        log.info("Redis refuses CONFIG GET; assuming it has 16 databases")
    except redis.RedisError as exc:
        log.warning("Redis at %s:%s does not answer yet (%s); assuming 16 databases",
                    endpoint.host, endpoint.port, type(exc).__name__)
    return RedisEndpoint(**{**endpoint.__dict__, "databases": databases})


def for_crawlers(endpoint: RedisEndpoint, public_url: str | None) -> RedisEndpoint:
    """The endpoint a crawler is given: the runner's, at ARCHIVER_REDIS_PUBLIC_URL's scheme,
    host and port when set (crawlers on other hosts reach the server by another address),
    with the crawl's own credentials either way."""
    if not public_url:
        return endpoint
    parts = urlsplit(public_url)
    return replace(endpoint, scheme=parts.scheme, host=parts.hostname,
                   port=parts.port or endpoint.port)


def databases_for(settings: Settings) -> int:
    """The databases the embedded Redis needs: one per crawl holding state (database 0 is no
    crawl's), for every running crawl and room for PAUSED_PER_RUNNING paused ones each. An
    empty database costs Redis about 0.5 kB and no CPU (docs/scaling.md)."""
    return max(MIN_DATABASES, (1 + PAUSED_PER_RUNNING) * settings.max_concurrent_crawls + 1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedRedis:
    """The runner's own redis-server, kept across daemon restarts."""

    def __init__(self, settings: Settings):
        self.databases = databases_for(settings)
        self.bind = settings.redis_bind
        # The runner's own connections: the first address bound, or loopback for a wildcard.
        self.host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.bind[0], self.bind[0])
        self.state_file = settings.run_dir / "redis.json"
        self.dir = settings.data_dir / "redis"
        self.max_bytes = settings.redis_max_bytes
        self.process: subprocess.Popen | None = None

    def ensure(self) -> RedisEndpoint:
        """A live server: the recorded one if it answers, else a new one on the same port
        (or on a free one when something else holds that port now)."""
        if self.process is not None:
            self.process.poll()  # reap a server we started and that died: no zombie left
        state = self._read_state()
        if state:
            endpoint = self._endpoint(state)
            if self._answers(endpoint):
                if self._too_few_databases(endpoint):
                    return self._restart(state)
                log.info("reusing the embedded Redis (pid %s, port %s)", state["pid"], state["port"])
                self._limit(endpoint)  # it may have been started by a version without the limit
                return endpoint
            self._kill_hung(state)
            port = state["port"] if self._port_is_free(state["port"]) else free_port()
            password = state["password"]
        else:
            port, password = free_port(), secrets.token_urlsafe(24)
        return self._start(port, password)

    def _too_few_databases(self, endpoint: RedisEndpoint) -> bool:
        """Whether the running server has fewer databases than the concurrency needs now
        (started before ARCHIVER_MAX_CONCURRENT_CRAWLS was raised): Redis cannot add any
        while it runs."""
        client = endpoint.client()
        try:
            have = int(client.config_get("databases").get("databases", self.databases))
        except redis.RedisError as exc:
            log.warning("could not read the embedded Redis's databases (%s)", type(exc).__name__)
            return False
        finally:
            client.close()
        if have >= self.databases:
            return False
        log.warning("the embedded Redis has %s databases and the concurrency needs %s: "
                    "restarting it (its append-only file keeps the crawls' state)", have, self.databases)
        return True

    def _restart(self, state: dict) -> RedisEndpoint:
        """Stop the server cleanly and start it again on its port with its password. Its ACL
        users are lost: the daemon starting now grants every held crawl's again (Held.granted)."""
        self.stop()
        return self._start(state["port"], state["password"])

    def _kill_hung(self, state: dict) -> None:
        """Our redis-server is alive but does not answer (stopped, wedged): it must be gone
        before a new one opens the same append-only file."""
        if not _is_redis_server(state["pid"], state["port"]):
            return
        log.warning("the embedded Redis (pid %s) runs but does not answer; killing it", state["pid"])
        os.kill(state["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _is_redis_server(state["pid"], state["port"]) and time.monotonic() < deadline:
            if self.process is not None and self.process.pid == state["pid"]:
                self.process.poll()
            time.sleep(0.05)

    def recorded(self) -> RedisEndpoint | None:
        """The endpoint of the server last started, as redis.json records it (it may be down)."""
        state = self._read_state()
        return self._endpoint(state) if state else None

    def stop(self) -> None:
        """Stop the recorded server (only if it is really our redis-server); SIGTERM makes
        Redis flush its append-only file and exit cleanly."""
        state = self._read_state()
        if not state or not _is_redis_server(state["pid"], state["port"]):
            return
        os.kill(state["pid"], signal.SIGTERM)
        if self.process and self.process.pid == state["pid"]:
            self.process.wait(timeout=30)
        else:
            deadline = time.monotonic() + 30
            while _is_redis_server(state["pid"], state["port"]) and time.monotonic() < deadline:
                time.sleep(0.05)
        log.info("stopped the embedded Redis (pid %s)", state["pid"])

    # --- internals ---------------------------------------------------------------------

    def _start(self, port: int, password: str) -> RedisEndpoint:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ConfigError("redis-server is not on PATH: install it or set ARCHIVER_REDIS_URL")
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.state_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = self.dir / "redis.conf"
        # The password goes into a 0600 file, not the command line other users can read.
        write_private(config, "\n".join([
            f"bind {' '.join(self.bind)}", f"port {port}", f"dir {self.dir}", "appendonly yes",
            "appendfsync everysec", f"databases {self.databases}", 'save ""',
            f"requirepass {password}", "logfile redis.log", "protected-mode yes",
            *(f"{name} {value}" for name, value in self._limits().items()), "",
        ]))
        self.process = subprocess.Popen(
            [binary, str(config)], start_new_session=True, cwd=self.dir,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            umask=0o077,  # its append-only file and log hold every crawl's data: 0600
        )
        state = {"pid": self.process.pid, "port": port, "password": password}
        endpoint = self._endpoint(state)
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers(endpoint):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(f"the embedded redis-server did not start; see {self.dir / 'redis.log'}")
            time.sleep(0.05)
        write_private(self.state_file, json.dumps(state))
        log.info("started the embedded Redis (pid %s, port %s, data in %s)", self.process.pid, port, self.dir)
        return endpoint

    def _limits(self) -> dict[str, str | int]:
        """Its memory limits. `maxmemory` refuses a write only once the command is read: one
        refused SET of 200 MB took a 32 MiB server to 224 MiB, and Redis makes room for a
        value once its length is announced (12 connections announcing 15 MiB held 192 MiB).
        So a value may be 16 MiB at most, a client's unread query 32 MiB, and all clients'
        buffers a quarter of `maxmemory`: past that Redis drops the connections holding the
        most, never the runner's own (CLIENT NO-EVICT, `admin_connect`)."""
        return {"maxmemory": self.max_bytes, "maxmemory-policy": "noeviction",
                "proto-max-bulk-len": 16 << 20, "client-query-buffer-limit": 32 << 20,
                "maxmemory-clients": max(self.max_bytes // 4, 1 << 20)}

    def _limit(self, endpoint: RedisEndpoint) -> None:
        """Its memory limits as the settings say now (writes over it fail; nothing is evicted)."""
        client = endpoint.client()
        try:
            for name, value in self._limits().items():
                client.config_set(name, value)
        except redis.RedisError as exc:
            log.warning("could not set the embedded Redis's memory limit (%s)", type(exc).__name__)
        finally:
            client.close()

    def _read_state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("ignoring an unreadable %s", self.state_file)
            return None

    def _endpoint(self, state: dict) -> RedisEndpoint:
        return RedisEndpoint(host=self.host, port=state["port"], password=state["password"],
                             databases=self.databases)

    @staticmethod
    def _answers(endpoint: RedisEndpoint) -> bool:
        return answers(endpoint, timeout=0.5)

    def _port_is_free(self, port: int) -> bool:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        with socket.socket(family) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server binds
            try:
                sock.bind((self.host, port))
            except OSError:
                return False
        return True


def answers(endpoint: RedisEndpoint, timeout: float) -> bool:
    """Whether a Redis server that knows our password answers at `endpoint`. One that is
    loading its data or running a long script is alive; a wrong password means another
    server holds the port."""
    client = endpoint.client(timeout=timeout)
    try:
        return bool(client.ping())
    except redis.BusyLoadingError:
        return True
    except (redis.ConnectionError, redis.TimeoutError):
        return False
    except redis.ResponseError:
        return True  # BUSY and the like: it speaks, it is alive
    except redis.RedisError:
        return False
    finally:
        client.close()


def _is_redis_server(pid: int, port: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return "redis-server" in cmdline and f":{port}" in cmdline and state != "Z"


def connect(settings: Settings) -> tuple[RedisEndpoint, EmbeddedRedis | None]:
    """The endpoint to use, and the embedded server when we own one."""
    if settings.redis_url:
        endpoint = external(settings.redis_url)
        if endpoint.databases <= settings.max_concurrent_crawls:
            log.warning("Redis at %s:%s has %s databases: at most %s crawls can hold state there "
                        "(its `databases` setting; the embedded one would have %s)", endpoint.host,
                        endpoint.port, endpoint.databases, endpoint.databases - 1, databases_for(settings))
        return endpoint, None
    embedded = EmbeddedRedis(settings)
    return embedded.ensure(), embedded


class RedisWatch:
    """Keeps an eye on the Redis server, at most one ping every `interval` seconds.

    `check(now)` restarts the embedded server when it does not answer (with a backoff when it
    will not start), and returns the endpoint the store must use whenever it has to reconnect
    and grant the crawls' ACL users again: the server moved (new port or password) or
    restarted (a new run_id: ACL users and scripts are lost). Otherwise it returns None. An
    external server (`embedded` None) is only watched: `up` says whether it answers, and its
    restart is reported the same way.
    """

    def __init__(self, embedded: EmbeddedRedis | None, endpoint: RedisEndpoint,
                 interval: float = WATCH_INTERVAL):
        self.embedded = embedded
        self.endpoint = endpoint
        self.interval = interval
        self.up = True
        self._run_id: str | None = None  # of the server last seen; None before the first look
        self._next: dt.datetime | None = None
        self._failed_starts = 0

    def check(self, now: dt.datetime) -> RedisEndpoint | None:
        if self._next is not None and now < self._next:
            return None
        self._next = now + dt.timedelta(seconds=self.interval)
        known = self.endpoint
        run_id = _run_id(self.endpoint)
        if run_id is None and self.embedded is not None:
            if self._failed_starts == 0:
                # Said here, not only in _seen: a restart that succeeds at once would
                # otherwise leave the operator no line saying Redis was ever down.
                log.warning("the embedded Redis at %s:%s does not answer; starting it again",
                            self.endpoint.host, self.endpoint.port)
            run_id = self._restart(now)
        if run_id is not None and self.embedded is not None:
            self._sweep_database_0()
        return self._seen(run_id, moved=self.endpoint != known)

    def _sweep_database_0(self) -> None:
        """Keep only the crawls' host budget in database 0 of the embedded server: every
        connection starts there and no ACL rule can close it to a crawl's user, so what
        else a crawler writes there escapes its budget (host_keys.py). (An external
        server's may be another program's.)"""
        client = self.endpoint.client()
        try:
            dropped = host_keys.sweep(client)
            if dropped:
                log.warning("dropped %d key(s) from the embedded Redis's database 0, which "
                            "holds only the host budget: only a crawler can have written them",
                            dropped)
        except redis.RedisError as exc:
            log.warning("could not empty the embedded Redis's database 0 (%s)", type(exc).__name__)
        finally:
            client.close()

    def _restart(self, now: dt.datetime) -> str | None:
        try:
            self.endpoint = self.embedded.ensure()
        except ConfigError as exc:
            self._failed_starts += 1
            backoff = min(self.interval * 2 ** self._failed_starts, MAX_RESTART_BACKOFF)
            self._next = now + dt.timedelta(seconds=backoff)
            if self._failed_starts == 1:
                log.error("the embedded Redis is down and does not start again (%s); "
                          "trying again every %g s at most", exc, MAX_RESTART_BACKOFF)
            return None
        self._failed_starts = 0
        return _run_id(self.endpoint)

    def _seen(self, run_id: str | None, moved: bool) -> RedisEndpoint | None:
        if run_id is None:
            if self.up:
                log.warning("Redis at %s:%s does not answer", self.endpoint.host, self.endpoint.port)
            self.up = False
            return None
        if not self.up:
            log.info("Redis at %s:%s answers again", self.endpoint.host, self.endpoint.port)
        self.up = True
        restarted = self._run_id is not None and run_id != self._run_id
        self._run_id = run_id
        if moved or restarted:
            log.info("Redis at %s:%s %s: reconnecting", self.endpoint.host, self.endpoint.port,
                     "moved" if moved else "restarted")
            return self.endpoint
        return None


def _run_id(endpoint: RedisEndpoint) -> str | None:
    """The server's run_id (new at every start), "" when it answers but will not say, None
    when it does not answer."""
    client = endpoint.client(timeout=1.0)
    try:
        return str(client.info("server").get("run_id", ""))
    except redis.ResponseError:
        return "" if answers(endpoint, timeout=1.0) else None  # INFO refused to us
    except redis.BusyLoadingError:
        return ""
    except redis.RedisError:
        return None
    finally:
        client.close()
