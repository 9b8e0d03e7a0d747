"""archiver's own settings, read from ARCHIVER_* environment variables.

Every value is validated by pydantic once; a bad value raises ConfigError naming the
variable and what it expected, so the daemon refuses to start instead of misbehaving.
Library code calls `get()` at run time, never at import time.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import math
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from archiver_crawler.netpolicy import parse_networks, split_networks
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from archiver.errors import ConfigError

CRAWLER_VERSION = "0.1.0"

ENV = {
    "data_dir": "ARCHIVER_DATA_DIR",
    "database_url": "ARCHIVER_DATABASE_URL",
    "redis_url": "ARCHIVER_REDIS_URL",
    "launcher": "ARCHIVER_LAUNCHER",
    "crawler_image": "ARCHIVER_CRAWLER_IMAGE",
    "crawler_kind": "ARCHIVER_CRAWLER_KIND",
    "max_concurrent_crawls": "ARCHIVER_MAX_CONCURRENT_CRAWLS",
    "lease_seconds": "ARCHIVER_LEASE_SECONDS",
    "poll_interval": "ARCHIVER_POLL_INTERVAL",
    "stall_minutes": "ARCHIVER_STALL_MINUTES",
    "pause_limit": "ARCHIVER_PAUSE_LIMIT",
    "retention_days": "ARCHIVER_RETENTION_DAYS",
    "disk_threshold_percent": "ARCHIVER_DISK_THRESHOLD",
    "max_launch_attempts": "ARCHIVER_MAX_LAUNCH_ATTEMPTS",
    "webhook_allow_hosts": "ARCHIVER_WEBHOOK_ALLOW_HOSTS",
    "webhook_allow_domains": "ARCHIVER_WEBHOOK_ALLOW_DOMAINS",
    "instance_id": "ARCHIVER_INSTANCE_ID",
    "trusted_proxies": "ARCHIVER_TRUSTED_PROXIES",
    "archive_max_bytes": "ARCHIVER_ARCHIVE_MAX_BYTES",
    "docker_timeout": "ARCHIVER_DOCKER_TIMEOUT",
    "local_crawler_command": "ARCHIVER_LOCAL_CRAWLER_COMMAND",
    "chromium": "ARCHIVER_CHROMIUM",
    "crawl_allow_networks": "ARCHIVER_CRAWL_ALLOW_NETWORKS",
    "crawl_log_mb": "ARCHIVER_CRAWL_LOG_MB",
    "swarm_constraints": "ARCHIVER_SWARM_CONSTRAINTS",
    "swarm_org_constraints": "ARCHIVER_SWARM_ORG_CONSTRAINTS",
    "storage_url": "ARCHIVER_STORAGE_URL",
    "storage_endpoint": "ARCHIVER_STORAGE_ENDPOINT",
    "storage_region": "ARCHIVER_STORAGE_REGION",
    "storage_access_key": "ARCHIVER_STORAGE_ACCESS_KEY",
    "storage_secret_key": "ARCHIVER_STORAGE_SECRET_KEY",
    "storage_crawler_access_key": "ARCHIVER_STORAGE_CRAWLER_ACCESS_KEY",
    "storage_crawler_secret_key": "ARCHIVER_STORAGE_CRAWLER_SECRET_KEY",
    "redis_bind": "ARCHIVER_REDIS_BIND",
    "redis_public_url": "ARCHIVER_REDIS_PUBLIC_URL",
    "redis_max_bytes": "ARCHIVER_REDIS_MAX_BYTES",
    "crawl_redis_max_bytes": "ARCHIVER_CRAWL_REDIS_MAX_BYTES",
    "dedup_max_payloads": "ARCHIVER_DEDUP_MAX_PAYLOADS",
    "replay_url": "ARCHIVER_REPLAY_URL",
    "replay_bind": "ARCHIVER_REPLAY_BIND",
}
# Their values are never repeated in an error message (nor anywhere else).
SECRET_VARIABLES = {"ARCHIVER_STORAGE_ACCESS_KEY", "ARCHIVER_STORAGE_SECRET_KEY",
                    "ARCHIVER_STORAGE_CRAWLER_ACCESS_KEY", "ARCHIVER_STORAGE_CRAWLER_SECRET_KEY"}
# An S3 bucket name (the rules every S3-compatible server shares) and a key prefix of plain
# path components, so a crawl's objects are always `<prefix>/<crawl id>/<name>`.
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}(/[A-Za-z0-9][A-Za-z0-9._-]{0,100}){0,9}")


@dataclasses.dataclass(frozen=True)
class S3Target:
    """Where archives go when ARCHIVER_STORAGE_URL is s3://bucket/prefix. The keys are
    excluded from repr(), so a logged or printed target never shows them."""

    endpoint: str  # scheme://host[:port], no path: path-style addressing puts the bucket first
    bucket: str
    prefix: str  # "" or "a/b" (no slash at either end)
    region: str
    access_key: str = dataclasses.field(repr=False)
    secret_key: str = dataclasses.field(repr=False)
    crawler_access_key: str = dataclasses.field(repr=False)
    crawler_secret_key: str = dataclasses.field(repr=False)

    @property
    def root(self) -> str:
        """What CrawlFile.root says for an object of this bucket (its `path` is the key)."""
        return f"s3://{self.bucket}"

    def crawl_prefix(self, crawl_id: str) -> str:
        """The keys of one crawl's objects start with this."""
        return f"{self.prefix}/{crawl_id}/" if self.prefix else f"{crawl_id}/"

# A Swarm placement constraint: `node.labels.zone==eu`, `node.role!=manager` ...
CONSTRAINT = re.compile(r"[A-Za-z0-9_.-]+ *(==|!=) *[^\s,]+")


# Where Chromium is looked for, in this order (the crawler's --chromium default too).
CHROMIUM_NAMES = ("/usr/bin/chromium", "chromium", "chromium-browser")
IMAGE_CHROMIUM = "/usr/bin/chromium"  # Debian's, in the image build-crawler-image.sh builds


def find_chromium() -> str | None:
    """The first Chromium of CHROMIUM_NAMES on this host, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def default_crawler_image() -> str:
    return f"archiver/crawler:{CRAWLER_VERSION}"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    data_dir: Path = Path("data")
    database_url: str | None = None
    redis_url: str | None = None
    launcher: Literal["auto", "docker", "local", "swarm"] = "auto"
    crawler_image: str = Field(default_factory=default_crawler_image, min_length=1)
    # Which crawler that is: browser options (docs/crawlers.md) need browsertrix-crawler.
    crawler_kind: Literal["auto", "archiver", "browsertrix"] = "auto"
    max_concurrent_crawls: int = Field(default=2, ge=1, le=1000)
    lease_seconds: int = Field(default=30, ge=5, le=3600)
    poll_interval: float = Field(default=2.0, gt=0, le=300)
    stall_minutes: float = Field(default=15, gt=0)
    pause_limit: int = Field(default=7 * 24 * 3600, ge=60, description="seconds")
    retention_days: float | None = Field(default=None, gt=0)
    disk_threshold_percent: float = Field(default=90, gt=0, le=100)
    max_launch_attempts: int = Field(default=5, ge=1, le=100)
    webhook_allow_hosts: tuple[str, ...] = ()
    webhook_allow_domains: tuple[str, ...] = ()
    instance_id: str = Field(default_factory=lambda: os.uname().nodename, min_length=1)
    # The largest WACZ or WARC the runner keeps from a crawler (runner/archive.py); bigger is refused.
    archive_max_bytes: int = Field(default=64 << 30, ge=1 << 20, le=1 << 50)
    # Seconds any one Docker engine call may take; None: 5 s, or a third of a shorter lease.
    docker_timeout: float | None = Field(default=None, gt=0, le=60)
    # Replaces archiver-crawler for the local launcher (e.g. browsertrix-crawler from source).
    local_crawler_command: tuple[str, ...] = ()
    # The Chromium archiver's own crawler drives in browser mode under the local launcher;
    # `none`: no Chromium anywhere, so new crawls default to HTTP mode.
    chromium: str | None = None
    # CIDRs the crawl address policy opens for every crawl (docs/security.md); none by default.
    crawl_allow_networks: tuple[str, ...] = ()
    # Reverse proxies in front of the admin (addresses or CIDRs) whose X-Forwarded-For names
    # the client; from anyone else the header is ignored (crawls/admin/login.py).
    trusted_proxies: tuple[str, ...] = ()
    crawl_log_mb: float = Field(default=10, gt=0, le=100_000, description="log kept per crawl, newest")
    # Placement constraints of every Swarm service, and more per org (by slug).
    swarm_constraints: tuple[str, ...] = ()
    swarm_org_constraints: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # Where kept archives go: unset = archives/ in the data dir; s3://bucket/prefix = that bucket
    # (docs/storage.md). The endpoint, region and keys only matter for s3://.
    storage_url: str | None = None
    storage_endpoint: str | None = None
    storage_region: str = Field(default="us-east-1", pattern=r"^[a-z0-9-]{1,40}$")
    storage_access_key: SecretStr | None = None
    storage_secret_key: SecretStr | None = None
    # Keys handed to crawlers (which run whatever the web sends): by default the ones above;
    # give keys that may only write under the prefix to keep a hijacked crawler from the rest.
    storage_crawler_access_key: SecretStr | None = None
    storage_crawler_secret_key: SecretStr | None = None
    # Where the embedded Redis listens: crawlers on other hosts (a swarm) need an address
    # they can reach. Every connection needs a password; crawls log in as their own user.
    redis_bind: tuple[str, ...] = ("127.0.0.1",)
    # The Redis address handed to crawlers (scheme, host, port; never credentials: each
    # crawl has its own), when it differs from the one the runner uses.
    redis_public_url: str | None = None
    # The embedded Redis's maxmemory (noeviction: a write over it fails, crawl state is never
    # evicted), and what one crawl's database may hold on any Redis before the crawl stops.
    redis_max_bytes: int = Field(default=1 << 30, ge=32 << 20, le=1 << 50)
    crawl_redis_max_bytes: int = Field(default=256 << 20, ge=1 << 20, le=1 << 50)
    # How many of the org's kept payloads (the newest archives' first) a deduplicating
    # crawl is handed in its Redis: 200 to 350 bytes each there, a copy per running crawl.
    dedup_max_payloads: int = Field(default=500_000, ge=0, le=1 << 40)
    # The origin archived pages are replayed on: never the admin's host name (cookies ignore
    # ports). 127.0.0.2 is loopback on Linux, a host of its own for the browser, and, like
    # 127.0.0.1, trusted for service workers without TLS (docs/security.md#replay).
    replay_url: str = "http://127.0.0.2:8090"
    # host:port the replay server listens on; unset: the replay URL's host and port.
    replay_bind: str | None = None

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("database_url", "redis_url")
    @classmethod
    def _url_scheme(cls, value: str | None, info) -> str | None:
        if value is None:
            return None
        allowed = {
            "database_url": ("sqlite://", "postgres://", "postgresql://"),
            "redis_url": ("redis://", "rediss://", "unix://"),
        }[info.field_name]
        if not value.startswith(allowed):
            raise ValueError(f"must start with one of {', '.join(allowed)}")
        return value

    @field_validator("redis_bind", mode="before")
    @classmethod
    def _addresses(cls, value):
        if isinstance(value, str):
            value = tuple(value.replace(",", " ").split())
        if not value:
            raise ValueError("names no address")
        for address in value:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"{address!r} is not an IP address") from None
        return tuple(value)

    @field_validator("redis_public_url")
    @classmethod
    def _public_redis(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("must be redis://HOST[:PORT] or rediss://HOST[:PORT]")
        if parts.username or parts.password:
            raise ValueError("must not hold credentials: each crawl logs in as its own user")
        if parts.path not in ("", "/"):
            raise ValueError("must not name a database: each crawl has its own")
        try:
            parts.port  # noqa: B018 - raises on a port out of range
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("webhook_allow_hosts", "webhook_allow_domains", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            return tuple(part.strip().lower() for part in value.split(",") if part.strip())
        return value

    @field_validator("docker_timeout")
    @classmethod
    def _under_the_lease(cls, value: float | None, info) -> float | None:
        # A slow engine call must never outlast the lease of the crawl it is made for.
        lease = info.data.get("lease_seconds")
        if value is not None and lease is not None and value > lease / 3:
            raise ValueError(f"must be at most a third of ARCHIVER_LEASE_SECONDS ({lease / 3:g} s)")
        return value

    @field_validator("local_crawler_command", mode="before")
    @classmethod
    def _command_line(cls, value):
        if isinstance(value, str):
            try:
                value = tuple(shlex.split(value))
            except ValueError as exc:
                raise ValueError(f"not a command line: {exc}") from None
            if not value:
                raise ValueError("is empty")
        if any("\0" in part for part in value):
            raise ValueError("holds a NUL character")
        return value

    @field_validator("swarm_constraints", mode="before")
    @classmethod
    def _constraints(cls, value):
        return constraints(value)

    @field_validator("swarm_org_constraints", mode="before")
    @classmethod
    def _org_constraints(cls, value):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError('not JSON (try {"org-slug": ["node.labels.zone==eu"]})') from None
        if not isinstance(value, dict):
            raise ValueError('must be a JSON object of org slugs (try {"org-slug": ["node.labels.zone==eu"]})')
        return {str(slug): constraints(rules) for slug, rules in value.items()}

    @field_validator("storage_url")
    @classmethod
    def _storage_url(cls, value: str | None, info) -> str | None:
        if value is None:
            return None
        if not value.startswith("s3://"):
            return local_storage(value, info.data.get("data_dir"))
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        if not BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ValueError(f"{bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
        prefix = prefix.strip("/")
        if prefix and not PREFIX.fullmatch(prefix):
            raise ValueError(f"the prefix {prefix!r} must be path components of A-Z a-z 0-9 . _ -")
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"

    @field_validator("storage_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
                or parts.path.strip("/") or parts.query or parts.username or parts.password:
            raise ValueError("must be http(s)://host[:port], with no path, query or credentials")
        return f"{parts.scheme}://{parts.netloc}"

    @field_validator("replay_url")
    @classmethod
    def _replay_origin(cls, value: str) -> str:
        return origin_of(value)

    @field_validator("replay_bind")
    @classmethod
    def _replay_bind(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in value):
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8090")
        return value

    @model_validator(mode="after")
    def _storage_complete(self) -> Settings:
        if self.s3_url is None:
            return self
        missing = [ENV[name] for name in ("storage_endpoint", "storage_access_key", "storage_secret_key")
                   if not getattr(self, name)]
        if missing:
            raise ValueError(f"ARCHIVER_STORAGE_URL={self.storage_url} needs {', '.join(missing)}")
        if bool(self.storage_crawler_access_key) != bool(self.storage_crawler_secret_key):
            raise ValueError("ARCHIVER_STORAGE_CRAWLER_ACCESS_KEY and "
                             "ARCHIVER_STORAGE_CRAWLER_SECRET_KEY go together")
        return self

    @property
    def s3_url(self) -> str | None:
        return self.storage_url if self.storage_url and self.storage_url.startswith("s3://") else None

    @property
    def local_storage(self) -> Path | None:
        """The folder archives go to when ARCHIVER_STORAGE_URL is a local path (through
        <data dir>/archives, a link to it: crawls.storage.link_local_archives)."""
        return Path(self.storage_url) if self.storage_url and not self.s3_url else None

    @property
    def s3(self) -> S3Target | None:
        """The bucket archives go to; None when they stay on this host."""
        if self.s3_url is None:
            return None
        bucket, _, prefix = self.storage_url.removeprefix("s3://").partition("/")
        access, secret = self.storage_access_key, self.storage_secret_key
        crawler_access = self.storage_crawler_access_key or access
        crawler_secret = self.storage_crawler_secret_key or secret
        return S3Target(
            endpoint=self.storage_endpoint, bucket=bucket, prefix=prefix, region=self.storage_region,
            access_key=access.get_secret_value(), secret_key=secret.get_secret_value(),
            crawler_access_key=crawler_access.get_secret_value(),
            crawler_secret_key=crawler_secret.get_secret_value(),
        )

    @property
    def docker_call_timeout(self) -> float:
        return self.docker_timeout or min(5.0, self.lease_seconds / 3)

    def crawler_name(self, launcher: str | None = None) -> str:
        """The crawler a launcher (`docker`, `swarm` or `local`; None: as ARCHIVER_LAUNCHER says) runs,
        as a message names it: the image, or the local command."""
        if (launcher or self.launcher) != "local":
            return self.crawler_image
        return self.local_crawler_command[0] if self.local_crawler_command else "archiver-crawler (local)"

    def browser_crawler(self, launcher: str | None = None) -> bool:
        """Whether that crawler drives a browser (takes --behaviors, --profile ...).

        ARCHIVER_CRAWLER_KIND says so, or `auto` reads the name: an image (or, for the local
        launcher, a command) whose name holds `browsertrix` is the real browsertrix-crawler.
        Labels are not read: judging an `add` must not need the Docker engine."""
        if self.crawler_kind != "auto":
            return self.crawler_kind == "browsertrix"
        if (launcher or self.launcher) == "local":
            return any("browsertrix" in part.lower() for part in self.local_crawler_command)
        repository = self.crawler_image.rsplit("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
        return "browsertrix" in repository.lower()

    def chromium_path(self, launcher: str | None = None) -> str | None:
        """The Chromium archiver's own crawler would drive for that launcher, or None.

        The local launcher: this host's, ARCHIVER_CHROMIUM or else the first of CHROMIUM_NAMES
        (the crawler's own default order). An image: the one scripts/build-crawler-image.sh
        installs; the engine is not asked, so judging an `add` needs no engine.
        ARCHIVER_CHROMIUM=none: none anywhere."""
        if self.chromium == "none":
            return None
        if (launcher or self.launcher) != "local":
            return IMAGE_CHROMIUM
        if self.chromium:
            return self.chromium if os.path.isfile(self.chromium) and os.access(self.chromium, os.X_OK) else None
        return find_chromium()

    @field_validator("chromium")
    @classmethod
    def _chromium(cls, value: str | None) -> str | None:
        if value is None or value == "none":
            return value
        if not os.path.isabs(value) or "\0" in value:
            raise ValueError("must be the absolute path of a Chromium, or none")
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, value):
        parts = value.split(",") if isinstance(value, str) else value
        try:
            return tuple(str(ipaddress.ip_network(part.strip(), strict=False)) for part in parts if part.strip())
        except ValueError as exc:
            raise ValueError(f"a comma-separated list of IP addresses or CIDRs ({exc})") from None

    @field_validator("crawl_allow_networks", mode="before")
    @classmethod
    def _networks(cls, value):
        # The crawler's own parser, so archiver refuses at start-up what the crawler would.
        return tuple(str(network) for network in parse_networks(split_networks(value)))

    @property
    def replay_host(self) -> str:
        """The replay origin's host name, which the admin must never answer to."""
        return urlsplit(self.replay_url).hostname

    @property
    def replay_listen(self) -> str:
        """Where the replay server binds (gunicorn's --bind)."""
        if self.replay_bind:
            return self.replay_bind
        parts = urlsplit(self.replay_url)
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"

    @property
    def run_dir(self) -> Path:
        """Sockets, pid files and the embedded Redis's files."""
        return self.data_dir / "run"

    @property
    def crawls_dir(self) -> Path:
        """One folder per crawl, mounted into its crawler containers."""
        return self.data_dir / "crawls"

    @property
    def wake_socket(self) -> Path:
        return self.run_dir / "wake.sock"


def local_storage(value: str, data_dir: Path | None) -> str | None:
    """ARCHIVER_STORAGE_URL as a local folder (a path, or file:///path): its absolute path,
    or None when it is the data dir's own archives/ (the default)."""
    raw = value.removeprefix("file://") if value.startswith("file://") else value
    if value.startswith("file://") and not raw.startswith("/"):
        raise ValueError("a file:// URL needs an absolute path (file:///srv/archives)")
    if "://" in raw or not raw.strip():
        raise ValueError("must be s3://bucket[/prefix], a local folder, or unset (archives in the data dir)")
    path = Path(raw).expanduser().resolve()
    if data_dir is None or path in (data_dir, data_dir / "archives"):
        return None
    if path.is_relative_to(data_dir):
        raise ValueError(f"{path} is inside the data dir {data_dir}: leave it unset, or name a "
                         "folder outside it")
    if data_dir.is_relative_to(path):
        raise ValueError(f"{path} holds the data dir {data_dir}: name a folder of its own")
    return str(path)


def origin_of(value: str) -> str:
    """scheme://host[:port] of an http(s) URL that names nothing more (no path, query or
    credentials); ValueError otherwise."""
    parts = urlsplit(value.strip())
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
            or parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must be http(s)://host[:port], with no path, query or credentials")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def constraints(value) -> tuple[str, ...]:
    """Swarm placement constraints from a comma-separated string or a list; ValueError names
    the first that is not `<attribute>==<value>` or `<attribute>!=<value>`."""
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, (list, tuple)):
        raise ValueError("must be a list of constraints such as node.labels.zone==eu")
    found = tuple(str(part).strip() for part in parts if str(part).strip())
    for rule in found:
        if not CONSTRAINT.fullmatch(rule):
            raise ValueError(f"{_quoted(rule)} is not a constraint (try node.labels.zone==eu or node.role!=manager)")
    return found


def duration_in_seconds(text: str) -> int:
    """`90s`, `30m`, `2h`, `7d` or plain seconds, as whole seconds; ValueError if it is not
    a duration (the range is the caller's: see parse_duration)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value = text.strip().lower()
    factor = units.get(value[-1:])
    number = value[:-1] if factor else value
    # Plain decimal numbers only: float() would also take `1e3`, `1_000`, `inf` and `nan`.
    # Up to 100 digits: a number read is refused by its range, with the range (exit 1).
    plain = re.fullmatch(r"[+-]?[0-9]{1,100}(?:\.[0-9]{1,15})?", number)
    seconds = float(number) * (factor or 1) if plain else math.nan
    if not math.isfinite(seconds):
        raise ValueError(f"{_quoted(text)} is not a duration (try 90s, 30m, 2h or 7d)")
    return int(seconds)


def _quoted(text: str) -> str:
    return repr(text[:30] + "…") if len(text) > 30 else repr(text)


def parse_duration(text: str) -> int:
    """A duration (see duration_in_seconds) over zero and under ten years."""
    seconds = duration_in_seconds(text)
    if not 0 < seconds < 10 * 365 * 86400:
        raise ValueError(f"{_quoted(text)} is out of range")
    return seconds


def from_environ(environ: dict[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for field, variable in ENV.items():
        raw = environ.get(variable)
        if raw is None or raw == "":
            continue
        if field == "pause_limit":
            try:
                raw = parse_duration(raw)
            except ValueError as exc:
                raise ConfigError(f"{variable}: {exc}") from None
        values[field] = raw
    try:
        return Settings(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a rule across settings: its message names them
            raise ConfigError(message) from None
        variable = ENV.get(str(error["loc"][0]), str(error["loc"][0]))
        got = "not shown: a secret" if variable in SECRET_VARIABLES else repr(shown(environ.get(variable)))
        raise ConfigError(f"{variable}: {message} (got {got})") from None


def shown(value: str | None) -> str | None:
    """A setting's value as an error message may quote it: a URL's credentials masked
    (database and Redis URLs carry passwords)."""
    if value is None or "@" not in value:
        return value
    return re.sub(r"^([^:/]*:?//)[^@/]*@", r"\1***@", value)


@functools.cache
def get() -> Settings:
    """The settings of this process, validated once."""
    return from_environ()
