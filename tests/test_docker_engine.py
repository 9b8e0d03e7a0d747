"""What archiver assumes about the Docker engine that scripts/docker-engine.sh starts.

The runner launches crawlers with host networking and an extra hosts entry naming Redis,
because the crawler refuses `redis://localhost` URLs; these tests pin that down.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPTS / args[0]), *args[1:]], capture_output=True,
                          text=True, timeout=60, env=env)


def test_env_prints_an_export_of_docker_host_for_the_private_socket(tmp_path):
    result = run_script("docker-engine.sh", "env",
                        env={"PATH": "/usr/bin:/bin", "ARCHIVER_DOCKER_RUN": str(tmp_path)})
    assert result.returncode == 0
    assert result.stdout == f"export DOCKER_HOST=unix://{tmp_path}/docker.sock\n"


def test_status_fails_where_no_engine_answers(tmp_path):
    result = run_script("docker-engine.sh", "status",
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                             "ARCHIVER_DOCKER_RUN": str(tmp_path),
                             "ARCHIVER_DOCKER_ROOT": str(tmp_path)})
    assert result.returncode == 1
    assert "no engine answers" in result.stderr
    assert result.stdout == ""


def test_options_name_the_folders_given_and_live_restore_only_when_asked(tmp_path):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "ARCHIVER_DOCKER_RUN": str(tmp_path / "run"),
           "ARCHIVER_DOCKER_ROOT": str(tmp_path / "root"), "ARCHIVER_DOCKER_DATA": str(tmp_path / "d")}
    plain = run_script("docker-engine.sh", "options", env=env)
    live = run_script("docker-engine.sh", "options", env={**env, "ARCHIVER_DOCKER_LIVE_RESTORE": "1"})
    assert plain.returncode == 0, plain.stderr
    options = plain.stdout.splitlines()
    assert options[options.index("--data-root") + 1] == str(tmp_path / "d")
    assert options[options.index("--host") + 1] == f"unix://{tmp_path}/run/docker.sock"
    assert options[options.index("--pidfile") + 1] == str(tmp_path / "root" / "docker.pid")
    assert "--bridge=none" in options and "--live-restore" not in options
    assert live.stdout.splitlines() == [*options, "--live-restore"]


def test_stop_never_signals_a_process_that_is_not_its_dockerd(tmp_path):
    (tmp_path / "docker.pid").write_text(f"{os.getpid()}\n")
    result = run_script("docker-engine.sh", "stop",
                        env={"PATH": "/usr/bin:/bin", "ARCHIVER_DOCKER_ROOT": str(tmp_path),
                             "ARCHIVER_DOCKER_RUN": str(tmp_path)})
    assert result.returncode == 0
    assert "no dockerd started" in result.stderr


@pytest.fixture
def host_tcp_server():
    """A one-shot TCP server on 127.0.0.1 that greets whoever connects."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(60)

    def greet():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"hello from the host\n")

    thread = threading.Thread(target=greet, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        thread.join(timeout=5)


@pytest.mark.docker
def test_a_host_network_container_reaches_the_host_through_an_extra_hosts_name(
    docker_client, crawler_image, host_tcp_server
):
    probe = (
        "import socket, os\n"
        f"conn = socket.create_connection(('redis', {host_tcp_server}), timeout=10)\n"
        "print(socket.gethostbyname('redis'), os.uname().nodename, conn.recv(100).decode())\n"
    )
    output = docker_client.containers.run(
        crawler_image, ["python3", "-c", probe], network_mode="host",
        extra_hosts={"redis": "127.0.0.1"}, hostname="crawl-probe-0", remove=True,
    ).decode()
    assert output.split() == ["127.0.0.1", "crawl-probe-0", "hello", "from", "the", "host"]
