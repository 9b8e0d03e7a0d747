"""What the container launcher and the Swarm launcher share: one bounded client to the Docker
engine DOCKER_HOST names, the labels that find instances again, the crawler's folder, its
user and its browser profile, and the limits every crawler gets.

Every engine request is bounded by Settings.docker_call_timeout (5 s, at most a third of the
lease): an engine that accepts and never answers costs one timeout, then EngineUnavailable,
which the daemon treats as a wait, never as a failure of the crawl. The low-level API is
used throughout because its calls are one request each.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import EngineUnavailable, ImageMissing, LaunchError
from runner.launchers.base import Instance, Launcher, LaunchSpec, MiB, write_crawler_config

CRAWLER_UID = 1000
STOP_TIMEOUT = 5  # seconds a crawler gets to stop after SIGTERM before it is killed
NOFILE = 4096
PIDS_LIMIT = 512
TMP_BYTES = 256 * MiB  # /tmp is a tmpfs: the root filesystem is read-only
LOG_OPTIONS = {"max-size": "10m", "max-file": "3"}
OWN_IMAGE = "archiver/crawler:"
REDIS_ALIAS = "redis"  # the crawler refuses localhost Redis URLs: a hosts entry names 127.0.0.1
PROFILE_DIR = "/profile"  # a crawl's browser profile is mounted here, read-only
SHM_BYTES, SHM_PER_WORKER = 256 * MiB, 128 * MiB
INVALID_MOUNT = ("invalid mount config", "invalid volume specification")


def install_id(settings: Settings) -> str:
    """Names this installation (its data dir) on a shared engine."""
    return hashlib.sha256(str(settings.data_dir).encode()).hexdigest()[:10]


def image_fix(image: str) -> str:
    """How to get `image` onto the engine: archiver's own is built here, never pulled."""
    if image.startswith(OWN_IMAGE):
        return "build it with scripts/build-crawler-image.sh"
    return f"run `archiver pull` (or `docker pull {image}`)"


def image_missing(image: str) -> ImageMissing:
    return ImageMissing(f"crawler image {image} is not on the Docker engine; {image_fix(image)}")


@dataclass(frozen=True)
class Host:
    """What one machine of the engine has: CPUs and bytes of memory (`docker info`'s NCPU and
    MemTotal; for Swarm, its largest node's)."""

    cpus: float
    memory: int

    @classmethod
    def of_info(cls, info: dict) -> Host | None:
        cpus, memory = info.get("NCPU"), info.get("MemTotal")
        if not isinstance(cpus, int) or not isinstance(memory, int) or cpus < 1 or memory < 1:
            return None
        return cls(cpus=float(cpus), memory=memory)


@dataclass(frozen=True)
class Limits:
    """One instance's container limits: CPU in billionths of a core, memory and /dev/shm bytes."""

    nano_cpus: int
    memory: int
    shm: int


def limits(spec: LaunchSpec, host: Host | None) -> Limits:
    """CPU: 0.9 of a core, and 0.6 for each worker after the first; memory as the spec says;
    /dev/shm 256 MiB and 128 MiB a worker after the first (Chromium's renderers share
    memory through it), at most a quarter of the memory. Each within what the host has: the
    engine refuses a CPU limit past its CPUs, and no retry changes that."""
    cpus, memory = 0.9 + 0.6 * (spec.workers - 1), spec.memory_limit
    if host is not None:
        cpus, memory = min(cpus, host.cpus), min(memory, host.memory)
    shm = min(SHM_BYTES + SHM_PER_WORKER * (spec.workers - 1), memory // 4)
    return Limits(nano_cpus=int(round(cpus * 1e9)), memory=memory, shm=shm)


def refusal_is_permanent(status: int | None, explanation: str) -> bool:
    """Whether the engine's refusal would be the same on a retry: 400 says the request itself
    is invalid (a CPU limit past the host's, a mount or runtime it does not know). Conflicts
    (409), missing things (404) and the engine's own errors (5xx) may pass, except a mount
    it cannot read, which Docker 20.10 answers with a 500."""
    return status == 400 or (status == 500 and any(words in explanation for words in INVALID_MOUNT))


@dataclass(frozen=True)
class Prepared:
    """An instance's folder made ready: its arguments, the user it runs as, and whether the
    Redis URL names the `redis` hosts entry (a loopback server)."""

    args: list[str]
    user: str
    redis_alias: bool


class EngineLauncher(Launcher):
    """A launcher that talks to the Docker engine: containers, or Swarm services."""

    depends_on = "the Docker engine"

    def __init__(self, settings: Settings, image: str | None = None):
        self.settings = settings
        self.image = image or settings.crawler_image
        self.install = install_id(settings)
        self.timeout = settings.docker_call_timeout
        self._client = None
        self._api_version: str | None = None  # learnt once: later clients skip that request
        self._host: Host | None = None  # learnt once per connection

    # Every engine call goes through here: an engine that does not answer is not an error
    # of the crawl, it is a wait.
    def _call(self, what: str, fn):
        import docker.errors
        import requests.exceptions

        try:
            return fn(self._api())
        except docker.errors.NotFound:
            raise
        except docker.errors.APIError as exc:
            raise LaunchError(f"Docker refused to {what}: {exc.explanation or exc}",
                              permanent=refusal_is_permanent(exc.status_code, str(exc.explanation))) from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            self.close()
            raise EngineUnavailable(f"Docker engine unreachable ({type(exc).__name__})") from exc

    def _api(self):
        if self._client is None:
            import docker

            _probe_unix_socket(self.timeout)
            self._client = docker.from_env(timeout=self.timeout, version=self._api_version or "auto")
            self._api_version = self._client.api.api_version
        return self._client.api

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._host = None  # the engine that answers next may be another machine

    def host(self) -> Host | None:
        """What the engine's machine has; None when its info does not say (limits unbounded)."""
        if self._host is None:
            self._host = self._read_host()
        return self._host

    def _read_host(self) -> Host | None:
        return Host.of_info(self._call("read the engine's state", lambda api: api.info()))

    def limits(self, spec: LaunchSpec) -> Limits:
        return limits(spec, self.host())

    def ping(self) -> bool:
        try:
            return bool(self._call("ping", lambda api: api.ping()))
        except LaunchError:
            return False

    def has_image(self) -> bool:
        import docker.errors

        try:
            self._call("find the image", lambda api: api.inspect_image(self.image))
        except (LaunchError, docker.errors.NotFound):
            return False
        return True

    def ref_of(self, process) -> str:
        return process.container_id

    def _name(self, spec: LaunchSpec) -> str:
        """One name per Process row: a second create of it is refused (409), never doubled."""
        return f"archiver-{self.install}-{spec.crawl_id[:12]}-{spec.instance}-p{spec.process_id}"

    def _labels(self, spec: LaunchSpec) -> dict[str, str]:
        return {
            "archiver.install": self.install, "archiver.data_dir": str(self.settings.data_dir),
            "archiver.crawl": spec.crawl_id, "archiver.instance": str(spec.instance),
            "archiver.process": str(spec.process_id), "archiver.runner": spec.runner_id,
        }

    def _find_labels(self, process_id: int, crawl_id: str, instance: int) -> list[str]:
        return [f"archiver.install={self.install}", f"archiver.process={process_id}",
                f"archiver.crawl={crawl_id}", f"archiver.instance={instance}"]

    @staticmethod
    def _prepare(spec: LaunchSpec) -> Prepared:
        """The folder (and the crawl's browser profile) owned by the crawler's uid when
        archiver runs as root, its config file written with the Redis URL, the crawler's
        arguments (no secret in them), and the folder's owner as the user it runs as."""
        owner = (CRAWLER_UID, CRAWLER_UID) if os.geteuid() == 0 else None
        if owner:
            os.chown(spec.instance_dir, *owner)
        alias = spec.redis.is_loopback
        write_crawler_config(spec.instance_dir, spec.config, spec.redis_url(REDIS_ALIAS if alias else None), owner)
        if spec.profile and owner:  # the crawler's user must read it (0600, in 0700 folders)
            os.chown(spec.profile, *owner)
        args = ["crawl", *spec.crawler_args("/crawls", profile_mount(spec))]
        return Prepared(args=args, user=folder_user(spec.instance_dir), redis_alias=alias)

    # --- for `archiver doctor` -----------------------------------------------------------

    def engine_version(self) -> str:
        """The engine's version; EngineUnavailable when it does not answer in time."""
        return str(self._call("tell its version", lambda api: api.version()).get("Version", "?"))

    def image_labels(self) -> dict[str, str] | None:
        """The image's labels; None when the engine does not have the image."""
        import docker.errors

        try:
            attrs = self._call("find the image", lambda api: api.inspect_image(self.image))
        except docker.errors.NotFound:
            return None
        return attrs.get("Config", {}).get("Labels") or {}


def folder_user(folder: Path) -> str:
    """`uid:gid` of the instance folder, the crawler's user: the real crawler's entrypoint
    runs as /crawls' owner only when both match (else it tries groupadd/useradd, which the
    dropped capabilities forbid). The gid is the folder's, not ours: in a setgid data dir
    the folder inherits the data dir's group."""
    info = os.stat(folder, follow_symlinks=False)
    return f"{info.st_uid}:{info.st_gid}"


def profile_mount(spec: LaunchSpec) -> str | None:
    """Where the crawler sees the crawl's browser profile (read-only), if it has one."""
    return f"{PROFILE_DIR}/{spec.profile.name}" if spec.profile else None


def labelled_instance(ref: str, labels: dict, running: bool, exit_code: int | None,
                      oom: bool = False) -> Instance:
    """An instance as its labels name it."""
    process = labels.get("archiver.process", "")
    instance = labels.get("archiver.instance", "0")
    return Instance(
        ref=ref, crawl_id=labels.get("archiver.crawl", ""),
        instance=int(instance) if instance.isdigit() else 0,
        process_id=int(process) if process.isdigit() else None, running=running,
        exit_code=None if running else exit_code, oom=oom,
    )


def _probe_unix_socket(timeout: float) -> None:
    """Connect to DOCKER_HOST's Unix socket ourselves first: the SDK leaks its socket when
    that connection fails, and an engine that is away is routine for us (OSError if so)."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        probe.connect(host.removeprefix("unix://"))
