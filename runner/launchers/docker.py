"""Crawler containers on the Docker engine DOCKER_HOST names, with host networking.

Every engine request is bounded by Settings.docker_call_timeout (5 s, at most a third of the
lease): an engine that accepts and never answers costs one timeout, then EngineUnavailable,
which the daemon treats as a wait, never as a failure of the crawl. The low-level API is
used throughout because its calls are one request each (the high-level `containers.list`
inspects every container, and `containers.run` pulls a missing image).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import EngineUnavailable, ImageMissing, LaunchError
from runner.launchers.base import Instance, Launched, Launcher, LaunchSpec, write_crawler_config

log = logging.getLogger(__name__)

CRAWLER_UID = 1000
STOP_TIMEOUT = 5  # seconds a crawler gets to stop after SIGTERM before it is killed
NOFILE = 4096
TMP_SIZE = "256m"  # /tmp is a tmpfs: the root filesystem is read-only
LOG_OPTIONS = {"max-size": "10m", "max-file": "3"}
LIVE_STATES = ("running", "restarting", "paused")
OWN_IMAGE = "archiver/crawler:"
PROFILE_DIR = "/profile"  # a crawl's browser profile is mounted here, read-only


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


class DockerLauncher(Launcher):
    """Containers named and labelled by installation, crawl, instance and Process row."""

    name = "docker"

    def __init__(self, settings: Settings, image: str | None = None):
        self.settings = settings
        self.image = image or settings.crawler_image
        self.install = install_id(settings)
        self.timeout = settings.docker_call_timeout
        self._client = None
        self._api_version: str | None = None  # learnt once: later clients skip that request

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
            raise LaunchError(f"Docker refused to {what}: {exc.explanation or exc}") from exc
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

    # --- launch ---------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Launched:
        owner = (CRAWLER_UID, CRAWLER_UID) if os.geteuid() == 0 else None
        if owner:
            os.chown(spec.instance_dir, *owner)
        redis_host = "redis" if spec.redis.is_loopback else None
        write_crawler_config(spec.instance_dir, spec.config, spec.redis_url(redis_host), owner)
        if spec.profile and owner:  # the container's user must read it (0600, in 0700 folders)
            os.chown(spec.profile, *owner)
        args = ["crawl", *spec.crawler_args("/crawls", profile_mount(spec))]
        container_id = self._create(spec, args, folder_user(spec.instance_dir), redis_host)
        self._call("start a container", lambda api: api.start(container_id))
        return Launched(ref=container_id, args=args, container_id=container_id, image=self.image)

    def _create(self, spec: LaunchSpec, args: list[str], user: str, redis_host) -> str:
        """The container's id. Never pulls: a missing image raises ImageMissing. A container
        of the same name (this Process row's, from a launch cut short) is taken over."""
        name = f"archiver-{self.install}-{spec.crawl_id[:12]}-{spec.instance}-p{spec.process_id}"
        for _ in range(2):
            created = self._create_named(name, spec, args, user, redis_host)
            if created:
                return created
            existing = self._call("inspect a container", lambda api: api.inspect_container(name))
            if existing["State"]["Status"] != "created":
                return existing["Id"]  # it started: this row's instance, not a second one
            self._call("remove a container", lambda api: api.remove_container(name, force=True))
        raise LaunchError(f"container {name} keeps reappearing unstarted")

    def _create_named(self, name: str, spec: LaunchSpec, args: list[str], user: str, redis_host) -> str:
        """The new container's id; "" when one of that name exists."""
        import docker.errors

        try:
            return self._call("create a container", lambda api: api.create_container(
                self.image, args, name=name, hostname=spec.hostname, user=user, detach=True,
                environment=spec.environment(redis_host), labels=self._labels(spec),
                host_config=self._host_config(api, spec, redis_host))["Id"])
        except docker.errors.ImageNotFound as exc:
            raise image_missing(self.image) from exc
        except docker.errors.NotFound as exc:  # e.g. the instance folder vanished
            raise LaunchError(f"Docker cannot create the container: {exc.explanation or exc}") from exc
        except LaunchError as exc:
            if isinstance(exc.__cause__, docker.errors.APIError) and exc.__cause__.status_code == 409:
                return ""
            raise

    def _labels(self, spec: LaunchSpec) -> dict[str, str]:
        return {
            "archiver.install": self.install, "archiver.data_dir": str(self.settings.data_dir),
            "archiver.crawl": spec.crawl_id, "archiver.instance": str(spec.instance),
            "archiver.process": str(spec.process_id), "archiver.runner": spec.runner_id,
        }

    @staticmethod
    def _host_config(api, spec: LaunchSpec, redis_host: str | None):
        from docker.types import LogConfig, Ulimit

        extra = spec.workers - 1
        return api.create_host_config(
            network_mode="host", extra_hosts={"redis": "127.0.0.1"} if redis_host else None,
            binds=_binds(spec),
            cap_drop=["ALL"], security_opt=["no-new-privileges"], pids_limit=512,
            mem_limit=spec.memory_limit, nano_cpus=int((0.9 + 0.6 * extra) * 1e9),
            read_only=True, tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={TMP_SIZE}"},
            log_config=LogConfig(type="json-file", config=LOG_OPTIONS),
            ulimits=[Ulimit(name="nofile", soft=NOFILE, hard=NOFILE)],
        )

    # --- observe --------------------------------------------------------------------------

    def find(self, process_id: int, crawl_id: str, instance: int, instance_dir: Path) -> Instance | None:
        """By the container's labels. A container created but never started (the launch was
        cut between the two calls) is removed: launching again is then safe."""
        labels = [f"archiver.install={self.install}", f"archiver.process={process_id}",
                  f"archiver.crawl={crawl_id}", f"archiver.instance={instance}"]
        found = None
        for summary in self._call("list containers", lambda api: api.containers(
                all=True, filters={"label": labels})):
            if summary.get("State") == "created":
                self.remove(summary["Id"])
            elif found is None or summary.get("State") in LIVE_STATES:
                found = summary
        return self.inspect(found["Id"]) if found else None

    def inspect(self, ref: str) -> Instance | None:
        import docker.errors

        if not ref:
            return None
        try:
            attrs = self._call("inspect a container", lambda api: api.inspect_container(ref))
        except docker.errors.NotFound:
            return None
        return _instance(attrs["Id"], attrs["Config"].get("Labels") or {}, attrs.get("State", {}))

    def list(self) -> list[Instance]:
        """One request for the list, one more per container that is no longer running (for its
        exit code); the whole stays within one timeout past the first request's start."""
        import docker.errors

        deadline = time.monotonic() + self.timeout
        summaries = self._call("list containers", lambda api: api.containers(
            all=True, filters={"label": f"archiver.install={self.install}"}))
        found = []
        for summary in summaries:
            labels, state = summary.get("Labels") or {}, summary.get("State", "")
            if state in LIVE_STATES or state == "created":
                found.append(_instance(summary["Id"], labels, {"Status": state}))
                continue
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"Docker engine too slow (listing took over {self.timeout:g} s)")
            try:
                attrs = self._call("inspect a container",
                                   lambda api, ref=summary["Id"]: api.inspect_container(ref))
            except docker.errors.NotFound:
                continue  # removed meanwhile
            found.append(_instance(attrs["Id"], labels, attrs.get("State", {})))
        return found

    def remove(self, ref: str) -> None:
        import docker.errors

        if not ref:
            return
        try:
            # Stopping a stopped container is a no-op; the request waits for STOP_TIMEOUT
            # on top of the engine timeout, then the engine kills the crawler.
            self._call("stop a container", lambda api: api.stop(ref, timeout=STOP_TIMEOUT))
            self._call("remove a container", lambda api: api.remove_container(ref, force=True))
        except docker.errors.NotFound:
            pass

    def log_tail(self, ref: str, lines: int = 20) -> str:
        import docker.errors

        try:
            return self._call("read logs", lambda api: api.logs(ref, tail=lines)).decode(errors="replace")
        except docker.errors.NotFound:
            return ""

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

    def crawler_version(self) -> str:
        """The first line `crawl --version` prints in a throwaway container (no network, no
        mounts); "" when it prints nothing or does not exit within the timeout."""
        container = self._call("create a container", lambda api: api.create_container(
            self.image, ["crawl", "--version"],
            host_config=api.create_host_config(network_mode="none", cap_drop=["ALL"]))["Id"])
        try:
            self._call("start a container", lambda api: api.start(container))
            self._call("wait for a container", lambda api: api.wait(container, timeout=self.timeout))
            output = self._call("read logs", lambda api: api.logs(container, stderr=False))
        except EngineUnavailable:
            return ""
        finally:
            self.remove(container)
        lines = output.decode(errors="replace").strip().splitlines()
        return lines[0].strip()[:100] if lines else ""


def folder_user(folder: Path) -> str:
    """`uid:gid` of the instance folder, the container's user: the real crawler's entrypoint
    runs as /crawls' owner only when both match (else it tries groupadd/useradd, which the
    dropped capabilities forbid). The gid is the folder's, not ours: in a setgid data dir
    the folder inherits the data dir's group."""
    info = os.stat(folder, follow_symlinks=False)
    return f"{info.st_uid}:{info.st_gid}"


def _binds(spec: LaunchSpec) -> dict:
    """The instance folder, and the crawl's browser profile (one file, read-only) if any."""
    binds = {str(spec.instance_dir): {"bind": "/crawls", "mode": "rw"}}
    if spec.profile:
        binds[str(spec.profile)] = {"bind": profile_mount(spec), "mode": "ro"}
    return binds


def profile_mount(spec: LaunchSpec) -> str | None:
    """Where the container sees the crawl's browser profile (read-only), if it has one."""
    return f"{PROFILE_DIR}/{spec.profile.name}" if spec.profile else None


def _instance(container_id: str, labels: dict, state: dict) -> Instance:
    """A container as an Instance; one created but never started has ended without a code."""
    running = state.get("Status") in LIVE_STATES
    process = labels.get("archiver.process", "")
    instance = labels.get("archiver.instance", "0")
    return Instance(
        ref=container_id, crawl_id=labels.get("archiver.crawl", ""),
        instance=int(instance) if instance.isdigit() else 0,
        process_id=int(process) if process.isdigit() else None, running=running,
        exit_code=None if running or state.get("Status") == "created" else state.get("ExitCode"),
        oom=bool(state.get("OOMKilled")),
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
