"""A Docker engine of a trial's own, which the trial stops and starts under running containers.

The suite's engine (scripts/docker-engine.sh, /run/archiver-docker) serves tests running at
the same time, so it is never restarted. A trial runs a second dockerd with the options that
script gives (`docker-engine.sh options`: no bridge, no iptables), on a socket, exec-root
and pidfile in a folder of the trial's own, as a child of the trial: it is signalled by its
pid, and `close()` removes it, its containers and its mounts whatever happened.

    with PrivateEngine.start(live_restore=False) as engine:
        engine.load_image(image)        # from the shared engine, when it differs
        engine.host                     # unix:///tmp/aeng-.../docker.sock, for DOCKER_HOST
        engine.stop()                   # SIGTERM to dockerd, as `systemctl stop docker` does
        engine.start_again()

Loading the crawler image (about 1 GB) into an empty data-root took 30 to 45 s here, so the
data-root is kept between runs (ARCHIVER_CHAOS_DOCKER_DATA, default
/var/lib/archiver-docker-chaos/data) and the image is loaded again only when the shared
engine's differs by id; nothing relies on it being there. One engine at a time uses it: the
trial that finds it in use (another trial, or a dockerd a killed trial left running) gets an
empty data-root in its own folder and pays the load.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = ROOT / "scripts" / "docker-engine.sh"
KEPT_DATA = Path(os.environ.get("ARCHIVER_CHAOS_DOCKER_DATA", "/var/lib/archiver-docker-chaos/data"))
SBIN_PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
START_TIMEOUT = 60.0
# dockerd without live-restore stops every container first (10 s of grace each, at once).
STOP_TIMEOUT = 45.0


def docker_cli() -> str:
    # The docker.io package's client matches its engine (as scripts/docker-engine.sh says).
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")


def missing() -> str | None:
    """Why no private engine can run here, or None."""
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    if shutil.which("dockerd", path=SBIN_PATH) is None:
        return "dockerd is not installed (scripts/docker-engine.sh start installs docker.io)"
    return None


class EngineFailed(RuntimeError):
    """The private dockerd did not start (or stop) in time; the message has its log's end."""


class PrivateEngine:
    def __init__(self, folder: Path, live_restore: bool):
        self.folder = folder
        self.live_restore = live_restore
        self.sock = folder / "docker.sock"
        self.log = folder / "dockerd.log"
        self.process: subprocess.Popen | None = None
        self.data, self._lock = self._data_root()
        self.started = 0

    @classmethod
    def start(cls, live_restore: bool = False) -> PrivateEngine:
        # Short: the socket's path must fit a Unix socket address.
        engine = cls(Path(tempfile.mkdtemp(prefix="aeng-", dir="/tmp")), live_restore)
        try:
            engine.start_again()
            engine.remove_containers()  # a killed trial's, in the kept data-root
        except BaseException:
            engine.close()
            raise
        return engine

    def __enter__(self) -> PrivateEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _data_root(self) -> tuple[Path, object | None]:
        """The kept data-root and its lock when free, else an empty one in our folder."""
        try:
            KEPT_DATA.mkdir(parents=True, exist_ok=True)
            lock = open(KEPT_DATA.parent / "lock", "a")  # noqa: SIM115 - held until close()
        except OSError:
            return self.folder / "data", None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return self.folder / "data", None
        return KEPT_DATA, lock

    def options(self) -> list[str]:
        env = {**os.environ, "PATH": SBIN_PATH, "ARCHIVER_DOCKER_ROOT": str(self.folder),
               "ARCHIVER_DOCKER_RUN": str(self.folder), "ARCHIVER_DOCKER_DATA": str(self.data),
               "ARCHIVER_DOCKER_LIVE_RESTORE": "1" if self.live_restore else "0"}
        done = subprocess.run(["bash", str(ENGINE_SCRIPT), "options"], env=env, capture_output=True,
                              text=True, check=True, timeout=30)
        return done.stdout.split()

    def start_again(self) -> None:
        """Start dockerd (again) and wait until it answers."""
        if self.process and self.process.poll() is None:
            raise RuntimeError("the private dockerd still runs")
        dockerd = shutil.which("dockerd", path=SBIN_PATH)
        with open(self.log, "a") as log:
            # The kept data-root's lock goes to dockerd too: held while it runs, so a dockerd
            # that outlives a killed trial keeps the next trial off its data-root.
            fds = (self._lock.fileno(),) if self._lock else ()
            self.process = subprocess.Popen(
                [dockerd, *self.options()], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=fds,
                env={**os.environ, "PATH": SBIN_PATH})
        self.started += 1
        try:
            wait_for(self.answers, START_TIMEOUT, 0.1, "the private dockerd answering")
        except AssertionError as exc:
            raise EngineFailed(f"{exc}; its log ends:\n{self.log_tail()}") from None

    def answers(self) -> bool:
        if self.process and self.process.poll() is not None:
            raise EngineFailed(f"dockerd exited {self.process.returncode}:\n{self.log_tail()}")
        return self.docker("info", check=False, timeout=10).returncode == 0

    def stop(self, sig: int = signal.SIGTERM) -> float:
        """Signal dockerd (by the pid we started) and wait until it exited: the seconds it took."""
        started = time.monotonic()
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise EngineFailed(f"dockerd ignored {signal.Signals(sig).name} for "
                                   f"{STOP_TIMEOUT:g} s:\n{self.log_tail()}") from None
        return time.monotonic() - started

    def docker(self, *args: str, check: bool = True, timeout: float = 120,
               **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([docker_cli(), "-H", self.host, *args], capture_output=True,
                              check=check, timeout=timeout, **kwargs)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # --- the image ---------------------------------------------------------------------

    def image_id(self, image: str, host: str | None = None) -> str | None:
        args = ["-H", host] if host else []
        done = subprocess.run([docker_cli(), *args, "image", "inspect", "--format", "{{.Id}}", image],
                              capture_output=True, text=True, timeout=60)
        return done.stdout.strip() if done.returncode == 0 else None

    def load_image(self, image: str, source: str | None = None) -> float:
        """Copy `image` from the engine `source` (default DOCKER_HOST) unless this engine has
        the same one; the seconds it took (0 when it had it)."""
        source = source or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        wanted = self.image_id(image, source)
        if wanted is None:
            raise EngineFailed(f"the engine at {source} has no image {image}")
        if self.image_id(image, self.host) == wanted:
            return 0.0
        started = time.monotonic()
        save = subprocess.Popen([docker_cli(), "-H", source, "save", image], stdout=subprocess.PIPE)
        try:
            self.docker("load", "--quiet", stdin=save.stdout, timeout=600)
        finally:
            save.stdout.close()
            save.wait(timeout=60)
        self.docker("image", "prune", "--force", check=False)  # the one it replaced
        return time.monotonic() - started

    # --- clean-up ----------------------------------------------------------------------

    def remove_containers(self) -> None:
        """Every container of this engine: all of them are some trial's."""
        listed = self.docker("ps", "--all", "--quiet", check=False, text=True, timeout=60)
        ids = listed.stdout.split()
        if ids:
            self.docker("rm", "--force", *ids, check=False, timeout=120)

    def close(self) -> None:
        """Containers, dockerd, its containerd and shims (by pid), then its mounts; always."""
        try:
            if self.process and self.process.poll() is None:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self.remove_containers()
                with contextlib.suppress(EngineFailed):
                    self.stop()
            for pid in self.leftover_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.release_mounts()
        finally:
            if self._lock:
                self._lock.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    def leftover_pids(self) -> list[int]:
        """Processes that outlived dockerd: its containerd and the containers' shims (which
        name our exec-root), and everything below them; deepest first."""
        parents: dict[int, int] = {}
        roots = []
        needle = str(self.folder).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                argv = (entry / "cmdline").read_bytes()
            except (OSError, IndexError):
                continue
            parents[int(entry.name)] = int(stat[1])
            if needle in argv and int(entry.name) != os.getpid():
                roots.append(int(entry.name))
        found, frontier = [], roots
        while frontier:
            found = frontier + found
            frontier = [pid for pid, parent in parents.items() if parent in frontier]
        return list(dict.fromkeys(found))

    def release_mounts(self) -> None:
        """What dockerd (or a killed container) left mounted under our folder and data-root,
        deepest first."""
        with open("/proc/mounts") as mounts:
            targets = [line.split()[1] for line in mounts]
        ours = [t for t in targets if any(t == str(p) or t.startswith(f"{p}/")
                                          for p in (self.folder, self.data))]
        for target in sorted(set(ours), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, timeout=30)
