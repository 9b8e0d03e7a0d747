"""What every launcher shares: the spec of one instance, what a launcher reports, and the
crawler's config file, written so that nothing a crawler planted in its folder is followed."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from archiver.errors import LaunchError
from runner.redis_server import RedisEndpoint

CONFIG_NAME = "crawler.json"
GiB, MiB = 2**30, 2**20
MAX_CONFIG_BYTES = MiB  # a crawl's own config is a few KB; more is not ours


@dataclass(frozen=True)
class LaunchSpec:
    """One crawler instance to start.

    `config` is the crawl's crawler config (crawler-protocol.md's option names); the launcher
    writes it with the Redis URL added. None means the daemon already wrote crawler.json and
    the launcher only adds the Redis URL to it.
    """

    crawl_id: str
    instance: int
    process_id: int
    instance_dir: Path
    workers: int
    redis: RedisEndpoint
    db: int
    runner_id: str
    disk_utilization: int = 90
    config: dict | None = None
    org: str = ""  # the crawl's org slug (the Swarm launcher's per-org placement)
    # STORE_* of the upload contract (runner/uploads.py): secrets, so out of repr() and
    # argv; they reach the crawler through its environment only.
    storage_env: dict[str, str] = field(default_factory=dict, repr=False)
    report_key: str = ""  # where the crawler RPUSHes its upload reports (WEBHOOK_URL)
    # How its archives are signed (crawls/wacz_auth.crawler_env): archiver's private key or
    # the authsign server's token, so environment only, like storage_env.
    signing_env: dict[str, str] = field(default_factory=dict, repr=False)
    browser_args: tuple[str, ...] = ()  # the crawl's browser options, as the real flags
    profile: Path | None = None  # a browser profile file to give the crawler, read-only

    @property
    def hostname(self) -> str:
        return hostname(self.crawl_id, self.instance)

    @property
    def memory_limit(self) -> int:
        """Bytes one instance may use: 1 GiB, and 768 MiB for each worker after the first."""
        return GiB + 768 * MiB * (self.workers - 1)

    def redis_url(self, host: str | None = None) -> str:
        """Holds the password: goes into the config file only, never argv or a log."""
        return self.redis.url(self.db, host=host)

    def environment(self, redis_host: str | None = None) -> dict[str, str]:
        """The crawler's own environment variables: CRAWL_ID, how it signs, and with object storage the
        upload contract and WEBHOOK_URL (redis://user:password@host:port/db/key, which holds
        the crawl's Redis password). Never logged, never stored on the Process row."""
        env = {"CRAWL_ID": self.crawl_id, **self.signing_env}
        if self.storage_env:
            env.update(self.storage_env)
            env["WEBHOOK_URL"] = f"{self.redis_url(redis_host)}/{self.report_key}"
        return env

    def crawler_args(self, cwd: str, profile: str | None = None) -> list[str]:
        """The crawler's arguments, as crawler-protocol.md names them, and the crawl's browser
        options; `profile` is where the crawler finds the profile file. No secret in here:
        ps shows them to every local user, and they are stored on the Process row (a
        profile's path names it; its content is the secret)."""
        return [
            "--config", f"{cwd}/{CONFIG_NAME}", "--workers", str(self.workers),
            "--crawlId", self.crawl_id, "--collection", self.crawl_id, "--cwd", cwd,
            "--generateWACZ", "--writePagesToRedis", "--logErrorsToRedis", "--headless",
            "--restartsOnError", "--diskUtilization", str(self.disk_utilization),
            # The page text in pages.jsonl, for search (the real crawler's default is none).
            "--text", "to-pages",
            *self.browser_args, *(["--profile", profile] if profile else []),
        ]


def hostname(crawl_id: str, instance: int) -> str:
    return f"crawl-{crawl_id}-{instance}"


def instance_index(crawl_id: str, host: str) -> int | None:
    """The instance number of `crawl-<id>-<i>` (hostname()), or None for another name."""
    prefix = f"{hostname(crawl_id, 0)[:-1]}"
    tail = host.removeprefix(prefix) if host.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


@dataclass
class Launched:
    ref: str
    args: list[str]  # as stored on the Process row: holds no secret
    pid: int | None = None
    container_id: str = ""
    image: str = ""


@dataclass
class Instance:
    """What a launcher knows about one instance it started."""

    ref: str
    crawl_id: str
    instance: int
    process_id: int | None
    running: bool
    exit_code: int | None = None
    oom: bool = False
    pid: int | None = None


class Launcher:
    """Start, find, inspect, list and remove crawler instances."""

    name = "?"
    depends_on = "the crawler launcher"  # what the log says is away when it does not answer

    def launch(self, spec: LaunchSpec) -> Launched:
        """Start the instance of `spec`. Launching a Process row whose instance already
        runs returns that instance instead of starting a second one."""
        raise NotImplementedError

    def find(self, process_id: int, crawl_id: str, instance: int, instance_dir: Path) -> Instance | None:
        """The instance started for a Process row, even when the row never got its ref or
        pid recorded (the daemon died during the launch); None when none ever started."""
        raise NotImplementedError

    def ref_of(self, process) -> str:
        """The ref of a Process row this launcher started."""
        raise NotImplementedError

    def inspect(self, ref: str) -> Instance | None:
        """The instance's state; None when no trace of it is left."""
        raise NotImplementedError

    def list(self) -> list[Instance]:
        raise NotImplementedError

    def remove(self, ref: str) -> None:
        """Stop it if it runs (SIGTERM, then SIGKILL) and forget it. Idempotent."""
        raise NotImplementedError

    def log_tail(self, ref: str, lines: int = 20) -> str:
        return ""

    def close(self) -> None:
        """Release connections; what was launched keeps running."""


# --- files in the instance folder ---------------------------------------------------------
#
# The instance folder is the crawler's working directory: whatever is in it may have been put
# there by a hostile crawler. Files are written as new files relative to the folder's own
# descriptor and renamed into place, so a link planted at the name is replaced, never followed.


def write_crawler_config(folder: Path, config: dict | None, redis_url: str,
                         owner: tuple[int, int] | None = None) -> None:
    """<folder>/crawler.json = config + redisStoreUrl, mode 0600, owned by `owner` if given."""
    try:
        with open_folder(folder) as dir_fd:
            if config is None:
                config = _read_config(dir_fd)
            data = json.dumps({**config, "redisStoreUrl": redis_url}).encode()
            replace_file(dir_fd, CONFIG_NAME, data, owner)
    except OSError as exc:  # the message names the file, never its content
        raise LaunchError(f"cannot write the crawler's config file in {folder}: {exc.strerror or exc}") from exc


def write_json(folder: Path, name: str, data: dict) -> None:
    with open_folder(folder) as dir_fd:
        replace_file(dir_fd, name, json.dumps(data).encode())


@contextlib.contextmanager
def open_folder(folder: Path):
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield dir_fd
    finally:
        os.close(dir_fd)


def replace_file(dir_fd: int, name: str, data: bytes, owner: tuple[int, int] | None = None) -> None:
    """Write `name` in the folder of `dir_fd` as a new 0600 file, then rename it into place."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # whatever the umask
            if owner is not None:
                os.fchown(handle.fileno(), *owner)
            handle.write(data)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def read_json(folder: Path, name: str) -> dict | None:
    """A JSON object from a regular file in `folder`, not followed if a link; None if absent
    or not a bounded JSON object."""
    try:
        with open_folder(folder) as dir_fd:
            data = read_regular(dir_fd, name)
        value = json.loads(data)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_regular(dir_fd: int, name: str, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The content of a regular file (no link, FIFO or device), at most `limit` bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{name} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{name} is larger than {limit} bytes")
    return data


def _read_config(dir_fd: int) -> dict:
    try:
        config = json.loads(read_regular(dir_fd, CONFIG_NAME))
    except OSError as exc:
        raise LaunchError(f"cannot read {CONFIG_NAME}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise LaunchError(f"{CONFIG_NAME} is not valid JSON") from exc
    if not isinstance(config, dict):
        raise LaunchError(f"{CONFIG_NAME} does not hold a mapping of options")
    return config
