"""Where crawler instances run: Docker containers, local processes, or (in unit tests) memory.

A Launcher starts one instance from a LaunchSpec and answers for it by a `ref` (a
container id, or the path prefix of a local process's files). Everything it starts
carries the crawl id, the instance number, the Process row and this installation, so a
restarted daemon finds its instances again and never touches another installation's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import ConfigError, EngineUnavailable, LaunchError
from runner.redis_server import RedisEndpoint, mask

log = logging.getLogger(__name__)

CRAWLER_UID = 1000
CONFIG_NAME = "crawler.json"
GiB, MiB = 2**30, 2**20
STOP_TIMEOUT = 5


@dataclass(frozen=True)
class LaunchSpec:
    """One crawler instance to start."""

    crawl_id: str
    instance: int
    process_id: int
    instance_dir: Path
    workers: int
    redis: RedisEndpoint
    db: int
    runner_id: str
    disk_utilization: int = 90

    @property
    def hostname(self) -> str:
        return hostname(self.crawl_id, self.instance)

    def crawler_args(self, cwd: str, redis_host: str | None = None) -> list[str]:
        """The crawler's arguments, as crawler-protocol.md names them."""
        return [
            "--config", f"{cwd}/{CONFIG_NAME}", "--workers", str(self.workers),
            "--redisStoreUrl", self.redis.url(self.db, host=redis_host),
            "--crawlId", self.crawl_id, "--collection", self.crawl_id, "--cwd", cwd,
            "--generateWACZ", "--writePagesToRedis", "--logErrorsToRedis", "--headless",
            "--restartsOnError", "--diskUtilization", str(self.disk_utilization),
        ]


def hostname(crawl_id: str, instance: int) -> str:
    return f"crawl-{crawl_id}-{instance}"


@dataclass
class Launched:
    ref: str
    args: list[str]  # password masked
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


class Launcher:
    """Start, inspect, list and remove crawler instances."""

    name = "?"

    def launch(self, spec: LaunchSpec) -> Launched:
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


# --- local processes -------------------------------------------------------------------


def crawler_command() -> list[str]:
    """archiver's own crawler next to this interpreter, else as a module."""
    script = Path(sys.executable).with_name("archiver-crawler")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "archiver_crawler"]


class LocalLauncher(Launcher):
    """Crawlers as local processes, each in its own session, through runner.local_wrapper."""

    name = "local"

    def __init__(self, settings: Settings, command: list[str] | None = None):
        self.crawls_dir = settings.crawls_dir
        self.command = command or crawler_command()

    def ref_of(self, process) -> str:
        return str(self._prefix(self.crawls_dir / process.crawl_id / str(process.instance), process.pk))

    @staticmethod
    def _prefix(instance_dir: Path, process_id: int) -> Path:
        return instance_dir / f"process-{process_id}"

    def launch(self, spec: LaunchSpec) -> Launched:
        prefix = self._prefix(spec.instance_dir, spec.process_id)
        args = spec.crawler_args(str(spec.instance_dir))
        env = {
            **os.environ, "CRAWLER_HOSTNAME": spec.hostname, "CRAWL_ID": spec.crawl_id,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                         os.environ.get("PYTHONPATH")])),
        }
        argv = [sys.executable, "-m", "runner.local_wrapper", str(prefix), "--", *self.command, *args]
        try:
            # posix_spawn, not Popen: the process outlives us by design (own session), and
            # we reap it ourselves when it ends while we are its parent (see _alive).
            pid = os.posix_spawn(sys.executable, argv, env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
            ])
        except OSError as exc:
            raise LaunchError(f"cannot start the local crawler: {exc}") from exc
        meta = {"pid": pid, "crawl_id": spec.crawl_id, "instance": spec.instance,
                "process_id": spec.process_id}
        prefix.with_suffix(".json").write_text(json.dumps(meta))
        masked = [mask(a, spec.redis) for a in [*self.command, *args]]
        return Launched(ref=str(prefix), args=masked, pid=pid)

    def inspect(self, ref: str) -> Instance | None:
        prefix = Path(ref)
        try:
            meta = json.loads(prefix.with_suffix(".json").read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("unreadable process file %s", prefix.with_suffix(".json"))
            return None
        instance = Instance(ref=ref, crawl_id=meta["crawl_id"], instance=meta["instance"],
                            process_id=meta["process_id"], running=False)
        if self._alive(meta["pid"], prefix):
            instance.running = True
            return instance
        try:
            instance.exit_code = int(prefix.with_suffix(".exit").read_text())
        except (FileNotFoundError, ValueError):
            instance.exit_code = None  # killed without a word: lost
        return instance

    def list(self) -> list[Instance]:
        found = []
        for meta in self.crawls_dir.glob("*/*/process-*.json"):
            instance = self.inspect(str(meta.with_suffix("")))
            if instance:
                found.append(instance)
        return found

    def remove(self, ref: str) -> None:
        prefix = Path(ref)
        try:
            meta = json.loads(prefix.with_suffix(".json").read_text())
        except (FileNotFoundError, ValueError):
            return
        pid = meta["pid"]
        if self._alive(pid, prefix):
            self._signal_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            while self._alive(pid, prefix) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._alive(pid, prefix):
                self._signal_group(pid, signal.SIGKILL)
        # A crawler whose wrapper was killed may still run in the group.
        self._signal_group(pid, signal.SIGKILL, quiet=True)
        prefix.with_suffix(".json").unlink(missing_ok=True)

    def log_tail(self, ref: str, lines: int = 20) -> str:
        return _tail(Path(ref).with_suffix(".log"), lines)

    def _alive(self, pid: int, prefix: Path) -> bool:
        """Whether `pid` is still our wrapper for this instance (pids are reused)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if b"runner.local_wrapper" not in cmdline or str(prefix).encode() not in cmdline:
            return False
        if state == "Z":  # ended while we are its parent: reap it
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
        return True

    @staticmethod
    def _signal_group(pid: int, sig: int, quiet: bool = False) -> None:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            if not quiet:
                log.warning("cannot signal process group %s: %s", pid, exc)


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - 16384, 0))
            text = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --- Docker ----------------------------------------------------------------------------


def install_id(settings: Settings) -> str:
    """Names this installation (its data dir) on a shared engine."""
    return hashlib.sha256(str(settings.data_dir).encode()).hexdigest()[:10]


class DockerLauncher(Launcher):
    """Crawler containers on the Docker engine DOCKER_HOST names, with host networking."""

    name = "docker"

    def __init__(self, settings: Settings, image: str | None = None):
        self.settings = settings
        self.image = image or settings.crawler_image
        self.install = install_id(settings)
        self._client = None

    # Every engine call goes through here: an engine that does not answer is not an error
    # of the crawl, it is a wait.
    def _call(self, what: str, fn):
        import docker.errors
        import requests.exceptions

        try:
            if self._client is None:
                import docker

                _probe_unix_socket()
                self._client = docker.from_env(timeout=20)
            return fn(self._client)
        except docker.errors.ImageNotFound as exc:
            raise LaunchError(f"crawler image {self.image} is not built "
                              "(scripts/build-crawler-image.sh)") from exc
        except docker.errors.NotFound:
            raise
        except docker.errors.APIError as exc:
            raise LaunchError(f"Docker refused to {what}: {exc.explanation or exc}") from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            self.close()
            raise EngineUnavailable(f"Docker engine unreachable ({type(exc).__name__})") from exc

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def ping(self) -> bool:
        try:
            return bool(self._call("ping", lambda c: c.ping()))
        except LaunchError:
            return False

    def has_image(self) -> bool:
        import docker.errors

        try:
            self._call("find the image", lambda c: c.images.get(self.image))
        except (LaunchError, docker.errors.NotFound):
            return False
        return True

    def ref_of(self, process) -> str:
        return process.container_id

    def launch(self, spec: LaunchSpec) -> Launched:
        extra = spec.workers - 1
        redis_host = "redis" if spec.redis.is_loopback else None
        args = spec.crawler_args("/crawls", redis_host=redis_host)
        if os.geteuid() == 0:
            os.chown(spec.instance_dir, CRAWLER_UID, CRAWLER_UID)
            user = f"{CRAWLER_UID}:{CRAWLER_UID}"
        else:
            user = f"{os.getuid()}:{os.getgid()}"
        labels = {
            "archiver.install": self.install, "archiver.data_dir": str(self.settings.data_dir),
            "archiver.crawl": spec.crawl_id, "archiver.instance": str(spec.instance),
            "archiver.process": str(spec.process_id), "archiver.runner": spec.runner_id,
        }
        container = self._call("start a container", lambda c: c.containers.run(
            self.image, ["crawl", *args], detach=True,
            name=f"archiver-{self.install}-{spec.crawl_id[:12]}-{spec.instance}-p{spec.process_id}",
            hostname=spec.hostname, environment={"CRAWL_ID": spec.crawl_id},
            labels=labels, network_mode="host",
            extra_hosts={"redis": "127.0.0.1"} if redis_host else None,
            volumes={str(spec.instance_dir): {"bind": "/crawls", "mode": "rw"}},
            user=user, cap_drop=["ALL"], security_opt=["no-new-privileges"], pids_limit=512,
            mem_limit=GiB + 768 * MiB * extra, nano_cpus=int((0.9 + 0.6 * extra) * 1e9),
        ))
        masked = ["crawl", *(mask(a, spec.redis) for a in args)]
        return Launched(ref=container.id, args=masked, container_id=container.id, image=self.image)

    def inspect(self, ref: str) -> Instance | None:
        import docker.errors

        if not ref:
            return None
        try:
            container = self._call("inspect a container", lambda c: c.containers.get(ref))
        except docker.errors.NotFound:
            return None
        return self._instance(container)

    def _instance(self, container) -> Instance:
        labels = container.labels
        state = container.attrs.get("State", {})
        running = state.get("Status") in ("created", "running", "restarting")
        process = labels.get("archiver.process", "")
        return Instance(
            ref=container.id, crawl_id=labels.get("archiver.crawl", ""),
            instance=int(labels.get("archiver.instance", 0)),
            process_id=int(process) if process.isdigit() else None, running=running,
            exit_code=None if running else state.get("ExitCode"), oom=bool(state.get("OOMKilled")),
        )

    def list(self) -> list[Instance]:
        containers = self._call("list containers", lambda c: c.containers.list(
            all=True, filters={"label": f"archiver.install={self.install}"}))
        return [self._instance(c) for c in containers]

    def remove(self, ref: str) -> None:
        import docker.errors

        if not ref:
            return
        try:
            container = self._call("find a container", lambda c: c.containers.get(ref))
            if container.status in ("created", "running", "restarting"):
                self._call("stop a container", lambda c: container.stop(timeout=STOP_TIMEOUT))
            self._call("remove a container", lambda c: container.remove(force=True))
        except docker.errors.NotFound:
            pass

    def log_tail(self, ref: str, lines: int = 20) -> str:
        import docker.errors

        try:
            container = self._call("read logs", lambda c: c.containers.get(ref))
            return self._call("read logs", lambda c: container.logs(tail=lines)).decode(errors="replace")
        except (docker.errors.NotFound, LaunchError):
            return ""


def _probe_unix_socket() -> None:
    """Connect to DOCKER_HOST's Unix socket ourselves first: the SDK leaks its socket when
    that connection fails, and an engine that is away is routine for us (OSError if so)."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        probe.connect(host.removeprefix("unix://"))


# --- in memory, for unit tests -------------------------------------------------------


@dataclass
class FakeInstance:
    spec: LaunchSpec
    running: bool = True
    exit_code: int | None = None
    oom: bool = False
    log: str = ""


@dataclass
class FakeLauncher(Launcher):
    """Instances that run until a test ends them with `exit()`."""

    name = "fake"
    instances: dict[str, FakeInstance] = field(default_factory=dict)
    fail_with: LaunchError | None = None  # raised by every launch while set
    unavailable: bool = False  # every call raises EngineUnavailable while set
    launches: int = 0

    def _check(self) -> None:
        if self.unavailable:
            raise EngineUnavailable("fake engine unreachable")

    def launch(self, spec: LaunchSpec) -> Launched:
        self._check()
        if self.fail_with:
            raise self.fail_with
        self.launches += 1
        ref = f"fake-{spec.process_id}"
        spec.instance_dir.mkdir(parents=True, exist_ok=True)
        self.instances[ref] = FakeInstance(spec)
        return Launched(ref=ref, args=[mask(a, spec.redis) for a in spec.crawler_args("/crawls")],
                        container_id=ref)

    def ref_of(self, process) -> str:
        return process.container_id

    def inspect(self, ref: str) -> Instance | None:
        self._check()
        fake = self.instances.get(ref)
        if fake is None:
            return None
        return Instance(ref=ref, crawl_id=fake.spec.crawl_id, instance=fake.spec.instance,
                        process_id=fake.spec.process_id, running=fake.running,
                        exit_code=fake.exit_code, oom=fake.oom)

    def list(self) -> list[Instance]:
        self._check()
        return [self.inspect(ref) for ref in self.instances]

    def remove(self, ref: str) -> None:
        self._check()
        self.instances.pop(ref, None)

    def log_tail(self, ref: str, lines: int = 20) -> str:
        fake = self.instances.get(ref)
        return fake.log if fake else ""

    # test controls
    def running(self, crawl_id: str | None = None) -> list[str]:
        return [ref for ref, f in self.instances.items()
                if f.running and (crawl_id is None or f.spec.crawl_id == crawl_id)]

    def exit(self, ref: str, code: int, log: str = "", oom: bool = False) -> None:
        fake = self.instances[ref]
        fake.running, fake.exit_code, fake.log, fake.oom = False, code, log, oom


def make_launcher(settings: Settings) -> Launcher:
    """The launcher ARCHIVER_LAUNCHER asks for; `auto` takes Docker when it can run the image."""
    if settings.launcher == "local":
        return LocalLauncher(settings)
    docker = DockerLauncher(settings)
    if settings.launcher == "docker":
        return docker
    if not _docker_sdk_configured():
        log.info("launcher: local (no Docker engine configured)")
        return LocalLauncher(settings)
    if not docker.ping():
        log.info("launcher: local (the Docker engine does not answer)")
        return LocalLauncher(settings)
    if not docker.has_image():
        log.info("launcher: local (the Docker engine has no image %s; build it with "
                 "scripts/build-crawler-image.sh)", docker.image)
        return LocalLauncher(settings)
    log.info("launcher: docker (engine answers, image %s present)", docker.image)
    return docker


def _docker_sdk_configured() -> bool:
    try:
        import docker  # noqa: F401
    except ImportError as exc:
        raise ConfigError("the docker package is missing from this environment") from exc
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()
