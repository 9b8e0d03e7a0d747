"""Crawlers as local processes, each in its own session, through runner/local_wrapper.py.

An instance is named by the path prefix of its files in the instance folder:
`process-<row id>.json` (what it is, and the wrapper's pid), `.log` and `.exit` (written by
the wrapper). The .json is written BEFORE the process is spawned, and a wrapper names its
prefix in its argv, so a launcher killed at any point of a launch leaves an instance that
find() and list() see: by its recorded pid, or else by its argv in /proc.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import ConfigError, LaunchError
from runner.launchers.base import (
    Instance,
    Launched,
    Launcher,
    LaunchSpec,
    open_folder,
    read_json,
    read_regular,
    write_crawler_config,
    write_json,
)

log = logging.getLogger(__name__)

STOP_TIMEOUT = 5
WRAPPER = str(Path(__file__).resolve().parent.parent / "local_wrapper.py")
# The crawler's whole environment: nothing of the daemon's (ARCHIVER_*, DJANGO_*, secrets).
ENV_ALLOWED = ("PATH", "LANG", "TZ", "PYTHONPATH")


def crawler_command() -> list[str]:
    """archiver's own crawler next to this interpreter, else as a module."""
    script = Path(sys.executable).with_name("archiver-crawler")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "archiver_crawler"]


def crawler_env(spec: LaunchSpec) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=str(spec.instance_dir), CRAWLER_HOSTNAME=spec.hostname, **spec.environment())
    return env


class LocalLauncher(Launcher):
    """Local crawler processes; `after_spawn(pid)` is a test hook (kill the launcher there)."""

    name = "local"

    def __init__(self, settings: Settings, command: list[str] | None = None,
                 after_spawn: Callable[[int], None] | None = None):
        self.crawls_dir = settings.crawls_dir
        self.command = list(command or settings.local_crawler_command or crawler_command())
        if not shutil.which(self.command[0]):
            raise ConfigError(f"ARCHIVER_LOCAL_CRAWLER_COMMAND: {self.command[0]} is not an executable "
                              "file (nor a program on PATH)")
        self.after_spawn = after_spawn

    def ref_of(self, process) -> str:
        return str(prefix_of(self.crawls_dir / process.crawl_id / str(process.instance), process.pk))

    def launch(self, spec: LaunchSpec) -> Launched:
        prefix = prefix_of(spec.instance_dir, spec.process_id)
        # A profile is read in place: the crawler runs as archiver's user, who owns the file.
        profile = str(spec.profile) if spec.profile else None
        args = [*self.command, *spec.crawler_args(str(spec.instance_dir), profile)]
        # Written even for an instance that runs already: it may not have read it yet, and
        # the daemon may have just rewritten it (atomically replaced either way).
        write_crawler_config(spec.instance_dir, spec.config, spec.redis_url())
        running = self.inspect(str(prefix))
        if running and running.running:  # launched before, the row just never heard of it
            return Launched(ref=str(prefix), args=args, pid=running.pid)
        prefix.with_suffix(".exit").unlink(missing_ok=True)
        meta = {"crawl_id": spec.crawl_id, "instance": spec.instance, "process_id": spec.process_id}
        write_json(spec.instance_dir, prefix.with_suffix(".json").name, {**meta, "pid": None})
        argv = [sys.executable, "-I", WRAPPER, str(prefix), "--memory", str(spec.memory_limit), "--", *args]
        pid = self._spawn(argv, crawler_env(spec))
        wait_for_exec(pid)
        if self.after_spawn:
            self.after_spawn(pid)
        write_json(spec.instance_dir, prefix.with_suffix(".json").name, {**meta, "pid": pid})
        return Launched(ref=str(prefix), args=args, pid=pid)

    @staticmethod
    def _spawn(argv: list[str], env: dict[str, str]) -> int:
        try:
            # posix_spawn, not Popen: the process outlives us by design (own session), and
            # we reap it ourselves when it ends while we are its parent (see _alive).
            return os.posix_spawn(sys.executable, argv, env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
            ])
        except OSError as exc:
            raise LaunchError(f"cannot start the local crawler: {exc}") from exc

    def find(self, process_id: int, crawl_id: str, instance: int, instance_dir: Path) -> Instance | None:
        found = self.inspect(str(prefix_of(instance_dir, process_id)))
        if found and not found.running and found.exit_code is None and found.pid is None:
            return None  # recorded, never spawned (or gone without a trace): nothing to adopt
        return found

    def inspect(self, ref: str) -> Instance | None:
        return self._inspect(ref, running_wrappers)

    def _inspect(self, ref: str, wrappers: Callable[[], dict[str, int]]) -> Instance | None:
        prefix = Path(ref)
        # The instance folder is the crawler's: its .json may be anything, so it is checked.
        meta = read_json(prefix.parent, prefix.with_suffix(".json").name) or {}
        crawl_id, number, process_id = meta.get("crawl_id"), meta.get("instance"), meta.get("process_id")
        if not (isinstance(crawl_id, str) and _count(number) and _count(process_id)):
            return None
        pid = meta.get("pid")
        if not _count(pid) or pid == 0:  # the launcher died before it wrote the pid
            pid = wrappers().get(ref)
        instance = Instance(ref=ref, crawl_id=crawl_id, instance=number, process_id=process_id,
                            running=False, pid=pid)
        if pid and self._alive(pid, prefix):
            instance.running = True
            return instance
        instance.exit_code = read_exit(prefix)  # None: killed without a word, lost
        return instance

    def list(self) -> list[Instance]:
        wrappers = functools.cache(running_wrappers)  # /proc is read once, and only if needed
        found = [self._inspect(str(meta.with_suffix("")), wrappers)
                 for meta in self.crawls_dir.glob("*/*/process-*.json")]
        return [instance for instance in found if instance]

    def remove(self, ref: str) -> None:
        prefix = Path(ref)
        found = self.inspect(ref)
        if found is None:
            return
        if found.running:
            self._signal_group(found.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            while self._alive(found.pid, prefix) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._alive(found.pid, prefix):
                self._signal_group(found.pid, signal.SIGKILL)
        # A crawler whose wrapper was killed may still run in the group: only when one of
        # the group works in this instance's folder is the group ours (pids are reused).
        if found.pid and group_works_in(found.pid, prefix.parent):
            self._signal_group(found.pid, signal.SIGKILL, quiet=True)
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
        if not is_wrapper(cmdline) or str(prefix).encode() not in cmdline:
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


def wait_for_exec(pid: int, timeout: float = 2.0) -> None:
    """Until `pid` shows the wrapper's argv: posix_spawn returns while the kernel is still
    inside exec, when /proc/<pid>/cmdline is still empty and _alive() would say "gone"."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if is_wrapper(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")):
                return
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return  # ended already: its .exit tells
        except (OSError, IndexError):
            return
        time.sleep(0.001)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def prefix_of(instance_dir: Path, process_id: int) -> Path:
    return instance_dir / f"process-{process_id}"


def is_wrapper(cmdline: list[bytes]) -> bool:
    # `-m runner.local_wrapper`: wrappers started before it ran as a file still count
    return any(arg.endswith(b"/local_wrapper.py") or arg == b"runner.local_wrapper" for arg in cmdline[:4])


def running_wrappers() -> dict[str, int]:
    """prefix -> pid of every local_wrapper in /proc (the prefix is the argument after the script)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i, arg in enumerate(cmdline[:4]):
            if is_wrapper([arg]) and i + 1 < len(cmdline):
                found[cmdline[i + 1].decode(errors="replace")] = int(entry.name)
                break
    return found


def group_works_in(pgid: int, folder: Path) -> bool:
    """Whether a live member of process group `pgid` has `folder` as its working directory."""
    folder = folder.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z" and Path(os.readlink(entry / "cwd")) == folder:
                return True
        except (OSError, IndexError, ValueError):
            continue
    return False


def read_exit(prefix: Path) -> int | None:
    """The wrapper's exit code file; the crawler could have replaced it with anything."""
    try:
        with open_folder(prefix.parent) as dir_fd:
            return int(read_regular(dir_fd, prefix.with_suffix(".exit").name, limit=32))
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int) -> str:
    """The last lines of a log the crawler could have replaced: a regular file, not followed
    if a link, at most 16 KiB read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        handle.seek(max(info.st_size - 16384, 0))
        text = handle.read(16384).decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
