"""One Chromium process: found, started headless with a temporary profile, watched, killed.

Chromium is told to reach nothing by itself: every request of a page is paused by CDP
`Fetch` and made by archiver (see intercept.py); as a second wall, its own network stack is
sent to a proxy where nothing listens (127.0.0.1:9, the discard port), loopback included
(`<-loopback>` removes the implicit bypass), with background networking, DNS prefetch,
WebRTC's non-proxied UDP and QUIC off. A request that escaped interception fails there.

Its sandbox stays on. Chromium refuses to start with it as root, so as root it runs as an
unprivileged user (`nobody`, switched to by util-linux's `setpriv` between the spawn and
Chromium's exec, so the pipes on fds 3 and 4 are set up by posix_spawn as for any user);
only when there is no such user or no setpriv does it run as root with `--no-sandbox`, and
a warning says so. If Chromium cannot start sandboxed as an unprivileged user (that one, or
the crawler's own when not root: no user namespaces, as in archiver's container under
Docker's default seccomp profile), it is started once more with `--no-sandbox`, still
unprivileged, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from archiver_crawler.browser.cdp import Connection

logger = logging.getLogger(__name__)

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
UNPRIVILEGED_USER = "nobody"
DEAD_PROXY = "127.0.0.1:9"
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def find_chromium(explicit: str | None = None) -> str | None:
    """The browser to run: `explicit` (only it, when given), else the first of CANDIDATES."""
    for name in (explicit,) if explicit else CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass(frozen=True)
class RunAs:
    """Whom Chromium runs as: this process's user, or (as root) an unprivileged one."""

    uid: int | None = None  # None: this process's user
    gid: int | None = None
    sandbox: bool = True

    def prefix(self) -> list[str]:
        if self.uid is None:
            return []
        return [shutil.which("setpriv") or "setpriv", f"--reuid={self.uid}",
                f"--regid={self.gid}", "--clear-groups", "--"]


def run_as() -> RunAs:
    """Not root: as is, sandboxed. Root: `nobody`, sandboxed, when it exists and setpriv is
    there; else root without the sandbox (Chromium refuses root with it)."""
    if os.geteuid() != 0:
        return RunAs()
    import pwd

    try:
        user = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        user = None
    if user is None or shutil.which("setpriv") is None:
        logger.warning("running as root with no %s user or no setpriv: Chromium starts "
                       "without its sandbox (--no-sandbox)", UNPRIVILEGED_USER)
        return RunAs(sandbox=False)
    return RunAs(user.pw_uid, user.pw_gid)


@dataclass(frozen=True)
class Limits:
    """What one browser may use: its JS heap per renderer (MiB), the RSS of its whole
    process group (MiB) before the watchdog kills it, and its renderer count."""

    js_heap_mb: int = 512
    max_rss_mb: int = 1024
    renderers: int = 4


def chromium_args(profile: Path, limits: Limits, user_agent: str | None = None,
                  lang: str | None = None, sandbox: bool = True) -> list[str]:
    """Chromium's flags; `--no-sandbox` only when the sandbox cannot be had."""
    args = [
        "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
        f"--proxy-server={DEAD_PROXY}", "--proxy-bypass-list=<-loopback>",
        "--disable-background-networking", "--dns-prefetch-disable", "--disable-quic",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--disable-component-update", "--disable-sync", "--disable-default-apps",
        "--disable-extensions", "--disable-breakpad", "--no-first-run", "--no-pings",
        "--disable-domain-reliability", "--metrics-recording-only", "--mute-audio",
        "--disable-features=Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions,"
        "AutofillServerCommunication,CertificateTransparencyComponentUpdater",
        "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--autoplay-policy=no-user-gesture-required",
        f"--renderer-process-limit={limits.renderers}",
        f"--js-flags=--max-old-space-size={limits.js_heap_mb}",
        "--window-size=1280,800", "about:blank",
    ]
    if user_agent:
        args.insert(-1, f"--user-agent={user_agent}")
    if lang:
        args.insert(-1, f"--lang={lang}")
    if not sandbox:
        args.insert(0, "--no-sandbox")
    return args


class ChromiumProcess:
    """A started Chromium and its CDP connection; `stop()` kills its whole process group
    and removes the profile directory."""

    def __init__(self, pid: int, profile: Path, connection: Connection,
                 runs_as: RunAs | None = None):
        self.pid = pid
        self.runs_as = runs_as or RunAs()
        self.profile = profile
        self.connection = connection
        self._reaped = False
        self.killed = False

    @classmethod
    async def start(cls, executable: str, limits: Limits, user_agent: str | None = None,
                    lang: str | None = None, runs_as: RunAs | None = None) -> ChromiumProcess:
        runs_as = runs_as or RunAs()
        profile = Path(tempfile.mkdtemp(prefix="archiver-chromium-"))
        if runs_as.uid is not None:
            os.chown(profile, runs_as.uid, runs_as.gid)
        args = chromium_args(profile, limits, user_agent, lang, runs_as.sandbox)
        command = [*runs_as.prefix(), executable, *args]
        env = _browser_env()
        if runs_as.uid is not None:
            env["HOME"] = str(profile)  # nobody's home does not exist
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        try:
            pid = os.posix_spawn(command[0], command, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, to_browser_r, 3),
                (os.POSIX_SPAWN_DUP2, from_browser_w, 4),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ], setsid=True)
        except OSError:
            shutil.rmtree(profile, ignore_errors=True)
            raise
        finally:
            os.close(to_browser_r)
            os.close(from_browser_w)
        connection = await _connect(to_browser_w, from_browser_r)
        return cls(pid, profile, connection, runs_as)

    def usable(self) -> bool:
        """Neither killed nor exited, and its pipe open."""
        return not self.killed and not self.connection.closed.is_set() and self.alive()

    def alive(self) -> bool:
        if self._reaped:
            return False
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            done = self.pid
        if done:
            self._reaped = True
        return not done

    def group_pids(self) -> list[int]:
        """Every live process of the browser's group (it was started in a session of its
        own, so its renderers and helpers are in the group too)."""
        pids = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
                    # fields 3 and 5 of stat: the state (Z: exited, not yet reaped), pgrp
                    if int(fields[2]) == self.pid and fields[0] != "Z":
                        pids.append(int(entry.name))
                except (OSError, ValueError, IndexError):
                    continue  # the process ended while being read
        return pids

    def memory_bytes(self) -> int:
        """The proportional set size (PSS) of the whole group: each shared page counted
        once across the browser's processes, which a sum of RSS would count per process."""
        total = 0
        for pid in self.group_pids():
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            except (OSError, ValueError, IndexError):
                continue
        return total

    def rss_bytes(self) -> int:
        """The sum of the group's resident sizes (shared pages counted in each process)."""
        total = 0
        for pid in self.group_pids():
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_SIZE
            except (OSError, ValueError, IndexError):
                continue
        return total

    def kill(self) -> None:
        """SIGKILL the whole group at once (what a watchdog does to a hung browser)."""
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    async def stop(self, grace: float = 3.0) -> None:
        await self.connection.close()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace
            while self.alive() and loop.time() < deadline:
                await asyncio.sleep(0.05)
        self.kill()  # stragglers of the group (renderers, zygote) too
        if not self._reaped:
            await asyncio.to_thread(_reap, self.pid)
            self._reaped = True
        deadline = asyncio.get_running_loop().time() + grace
        while self.group_pids() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)  # helpers die a moment after the SIGKILL
        shutil.rmtree(self.profile, ignore_errors=True)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _browser_env() -> dict[str, str]:
    # Proxy variables would be read by nothing (the flags win), but keep the child's
    # environment to what it needs.
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "XDG_RUNTIME_DIR",
            "FONTCONFIG_PATH", "CHROME_DEVEL_SANDBOX")
    return {k: v for k, v in os.environ.items() if k in keep}


async def _connect(write_fd: int, read_fd: int) -> Connection:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
                                 os.fdopen(read_fd, "rb", buffering=0))
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol,
                                                 os.fdopen(write_fd, "wb", buffering=0))
    return Connection(reader, transport)
