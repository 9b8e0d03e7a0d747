"""A PostgreSQL cluster of a test's own, to stop and restart under a running daemon.

The machine's shared server (ARCHIVER_TEST_POSTGRES_URL) must never go down under other
tests, so a trial that restarts its database makes one here: initdb in a folder of its
own, trust authentication, listening on 127.0.0.1 on a free port only.

    with PrivateCluster.start() as cluster:
        cluster.url            # postgres://postgres@127.0.0.1:<port>/postgres
        cluster.restart()      # pg_ctl restart -m fast
        cluster.stop(); cluster.start_again()

PostgreSQL refuses to run as root; under root the cluster's folder belongs to the
`postgres` user and its tools run as that user (runuser).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.ports import free_port


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> str | None:
    """Why no cluster can be made here, or None."""
    if pg_bin() is None:
        return "no initdb (PostgreSQL server binaries) on this machine"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user to run PostgreSQL as"
    return None


class PrivateCluster:
    def __init__(self, folder: Path, port: int):
        self.folder, self.port = folder, port
        self.data = folder / "data"
        self.log = folder / "postgres.log"

    @classmethod
    def start(cls) -> PrivateCluster:
        # Not under pytest's tmp_path: its parents are root's alone (0700), which the
        # postgres user cannot enter. A short name keeps the Unix socket path short too.
        folder = Path(tempfile.mkdtemp(prefix="apg-", dir="/tmp"))
        cluster = cls(folder, free_port())
        try:
            if os.geteuid() == 0:
                entry = pwd.getpwnam("postgres")
                os.chown(folder, entry.pw_uid, entry.pw_gid)
            cluster._tool("initdb", "-D", str(cluster.data), "-U", "postgres", "--auth=trust",
                          "-E", "UTF8", "--no-sync", "--no-instructions")
            for attempt in range(3):
                try:
                    cluster.start_again()
                    break
                except subprocess.CalledProcessError:
                    if attempt == 2:
                        raise
                    cluster.port = free_port()  # another process took the port meanwhile
        except BaseException:
            cluster.close()
            raise
        return cluster

    def __enter__(self) -> PrivateCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _tool(self, name: str, *args: str, timeout: float = 120) -> None:
        command = [str(pg_bin() / name), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=timeout, cwd=self.folder)

    def _options(self) -> str:
        # Durability is not what the trials check; fsync off keeps them fast on a busy disk.
        return (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={self.folder} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off")

    def start_again(self) -> None:
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", self._options(),
                   "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._tool("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", self._options(),
                   "-m", mode, "-w", "-t", "60", "restart")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def close(self) -> None:
        if self.running():
            try:
                self.stop("immediate")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pid = int((self.data / "postmaster.pid").read_text().split()[0])
                os.kill(pid, 9)
        shutil.rmtree(self.folder, ignore_errors=True)
