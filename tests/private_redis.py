"""A redis-server of a test's own on a free port (never the machine's 6379), which the test
may flush, stop or restart freely."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ports import free_port


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen
    databases: int = 256

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


def start_redis(tmp: Path, databases: int = 256, port: int | None = None) -> RedisServer:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not on PATH (scripts/test.sh installs it)")
    port = port or free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--databases", str(databases), "--dir", str(tmp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60  # a process starting on a busy machine
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return RedisServer(port=port, process=proc, databases=databases)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("redis-server did not start")
