"""A redis-server of a test's own on a free port (never the machine's 6379), which the test
may flush, stop or restart freely."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

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
    # A free port may be taken before the server binds it: the server then exits, and the
    # port answers for someone else. So it counts as started when the server that answers
    # is this process, and a port of our own choosing is tried again.
    for _ in range(1 if port else 3):
        chosen = port or free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--databases", str(databases), "--dir", str(tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60  # a process starting on a busy machine
        while time.monotonic() < deadline and proc.poll() is None:
            if _answers_as(chosen, proc.pid):
                return RedisServer(port=chosen, process=proc, databases=databases)
            time.sleep(0.05)
        if proc.poll() is None:  # running, yet not answering in a minute
            proc.kill()
            proc.wait()
            break
    pytest.fail("redis-server did not start")


def _answers_as(port: int, pid: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5,
                         socket_connect_timeout=0.2)
    try:
        return client.info("server").get("process_id") == pid
    except redis.RedisError:
        return False
    finally:
        client.close()
