"""scripts/lib/python.sh: which Python scripts/start.sh and scripts/test.sh build .venv with;
and what start.sh says and does when its port is taken or the admin is up.

The finder runs in bash with a PATH holding only stub interpreters: shell scripts that
print a version, fail like a pyenv shim whose version is not selected, or lack ensurepip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
LIB = REPO / "scripts" / "lib" / "python.sh"
BASH = shutil.which("bash") or "/bin/bash"

# What a stub does: print this version, or "broken" (exit 127, as a pyenv shim does).
STUB = """#!{bash}
case "$*" in *ensurepip*) exit {ensurepip_rc};; esac
{body}
"""


def stubs(folder: Path, versions: dict[str, str], no_ensurepip: tuple[str, ...] = ()) -> Path:
    folder.mkdir(exist_ok=True)
    for name, version in versions.items():
        body = ('echo "pyenv: $0: command not found" >&2; exit 127' if version == "broken"
                else f"echo {version}")
        script = folder / name
        script.write_text(STUB.format(bash=BASH, body=body,
                                      ensurepip_rc=1 if name in no_ensurepip else 0))
        script.chmod(0o755)
    return folder


def finder(path: Path | str, call: str = "find_python", **env) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, "-c", f'source "$0" && {call}', str(LIB)],
                          env={"PATH": str(path), **env}, capture_output=True, text=True,
                          timeout=30)


CHOICES = {
    "the newest listed first": ({"python3.13": "3.13", "python3.12": "3.12", "python3.11": "3.11",
                                 "python3": "3.11"}, "python3.13"),
    "a broken pyenv shim is passed over": ({"python3.13": "broken", "python3.12": "broken",
                                             "python3.11": "3.11"}, "python3.11"),
    "python3 when it is recent": ({"python3": "3.12"}, "python3"),
    "a future 3.x": ({"python3": "3.14"}, "python3"),
    "a future 4.0": ({"python3": "4.0"}, "python3"),
    "a name that lies is judged by its version": ({"python3.12": "3.10", "python3": "3.11"},
                                                  "python3"),
}


@pytest.mark.parametrize(("versions", "chosen"), CHOICES.values(), ids=CHOICES.keys())
def test_the_first_interpreter_that_is_3_11_or_newer_is_chosen(tmp_path, versions, chosen):
    result = finder(stubs(tmp_path / "bin", versions))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{chosen}\n"
    assert result.stderr == ""


def test_when_none_is_recent_enough_it_says_what_it_found_and_what_to_install(tmp_path):
    # 3.9 is older than 3.11, though "3.9" > "3.11" as text.
    result = finder(stubs(tmp_path / "bin", {"python3.11": "broken", "python3": "3.9"}))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "archiver needs Python 3.11 or newer, and found only python3.11 (does not run), " \
           "python3 (3.9)" in result.stderr
    assert "apt-get install python3 python3-venv" in result.stderr
    assert "ARCHIVER_PYTHON=" in result.stderr


def test_with_no_python_at_all_it_names_what_it_looked_for(tmp_path):
    result = finder(stubs(tmp_path / "bin", {}))
    assert result.returncode == 1
    assert "found none of python3.13 python3.12 python3.11 python3 on PATH" in result.stderr
    assert "Install one" in result.stderr


def test_archiver_python_is_used_when_recent_and_refused_when_not(tmp_path):
    folder = stubs(tmp_path / "bin", {"python3.13": "3.13", "old": "3.10", "mine": "3.12",
                                      "dead": "broken"})
    chosen = finder(folder, ARCHIVER_PYTHON=str(folder / "mine"))
    assert (chosen.returncode, chosen.stdout) == (0, f"{folder / 'mine'}\n")
    old = finder(folder, ARCHIVER_PYTHON=str(folder / "old"))
    assert old.returncode == 1
    assert old.stderr == f"ARCHIVER_PYTHON={folder / 'old'} is Python 3.10; archiver needs 3.11 or newer\n"
    dead = finder(folder, ARCHIVER_PYTHON=str(folder / "dead"))
    assert dead.returncode == 1
    assert "does not run as a Python interpreter" in dead.stderr


def test_a_python_without_ensurepip_names_its_venv_package(tmp_path):
    folder = stubs(tmp_path / "bin", {"python3": "3.12", "python3.13": "3.13"},
                   no_ensurepip=("python3",))
    missing = finder(folder, "venv_package_missing python3")
    assert (missing.returncode, missing.stdout) == (0, "python3.12-venv\n")
    ready = finder(folder, "venv_package_missing python3.13")
    assert (ready.returncode, ready.stdout) == (1, "")


def test_this_machine_has_a_suitable_interpreter_and_the_scripts_use_the_finder():
    result = finder(os.environ["PATH"])
    assert result.returncode == 0, result.stderr
    version = subprocess.run([result.stdout.strip(), "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True, check=True).stdout
    assert version == "True\n"
    for script in ("start.sh", "test.sh"):
        text = (REPO / "scripts" / script).read_text()
        assert 'source "$' in text and "lib/python.sh" in text
        assert "python3.11 -m" not in text and ":-python3.11" not in text


# --- scripts/start.sh ---------------------------------------------------------------------
# The real script, in a copy of the checkout whose virtualenv is installed: gunicorn is this
# virtualenv's, `archiver` (migrate, ensureadmin, run --daemon ...) only records its
# arguments, and ReplayWeb.page's fetch does nothing.

SHELL_STUB = "#!{bash}\n{body}\n"


def executable(path: Path, body: str) -> None:
    path.write_text(SHELL_STUB.format(bash=BASH, body=body))
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "clone"
    (root / "scripts" / "lib").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "start.sh", root / "scripts")
    shutil.copy(LIB, root / "scripts" / "lib")
    executable(root / "scripts" / "replay-files.sh", "exit 0")
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    executable(venv / "python", f'exec {sys.executable} "$@"')
    executable(venv / "archiver", f'echo "$*" >> {root / "archiver-calls"}')
    (venv / "gunicorn").symlink_to(Path(sys.executable).parent / "gunicorn")
    (root / ".venv" / ".installed").touch()
    return root


def start(checkout: Path, port: int, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    environ.update(ARCHIVER_PORT=str(port), ARCHIVER_DATA_DIR=str(checkout / "data"),
                   PYTHONPATH=str(REPO), ARCHIVER_REPLAY_URL=f"http://127.0.0.2:{free_port('127.0.0.2')}")
    environ.update(env)
    return subprocess.run([BASH, str(checkout / "scripts" / "start.sh")], env=environ,
                          capture_output=True, text=True, timeout=90)


def archiver_calls(checkout: Path) -> list[str]:
    calls = checkout / "archiver-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def taken(port: int) -> str:
    return (f"[start] port {port} of 127.0.0.1 is taken by another program: stop it, or pick "
            "another port with ARCHIVER_PORT (e.g. ARCHIVER_PORT=8080 bash scripts/start.sh)\n")


def test_start_with_its_port_taken_stops_at_once_with_one_line_naming_archiver_port(checkout):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = start(checkout, port)
    assert (result.returncode, result.stderr) == (1, taken(port))
    assert archiver_calls(checkout) == []  # nothing migrated, served or run


def test_start_stops_when_gunicorn_cannot_bind_its_port_and_runs_no_daemon(checkout):
    with socket.socket() as holder:  # bound, not listening: only gunicorn's bind finds it
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        result = start(checkout, port)
    assert (result.returncode, result.stderr) == (1, taken(port))
    assert "run --daemon" not in archiver_calls(checkout)


@pytest.mark.parametrize("port", ["http", "0", "65536"])
def test_start_refuses_an_archiver_port_that_is_no_port(checkout, port):
    result = start(checkout, port)
    assert (result.returncode, result.stderr) == (
        1, f"[start] ARCHIVER_PORT={port} is not a port number (1 to 65535)\n")


def test_start_hints_a_first_crawl_that_works_as_printed(checkout):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = start(checkout, port)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert f"[start] admin: http://127.0.0.1:{port}/admin/" in result.stderr
    assert archiver_calls(checkout)[-1] == "run --daemon"
    (add,) = [line for line in lines if "archiver add" in line]
    assert add.endswith("then add a crawl: archiver add https://example.org/")  # a public site
    (local,) = [line for line in lines if "127.0.0.1:8001" in line]
    assert "start with ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.1/32 bash scripts/start.sh" in local
    readme = (REPO / "README.md").read_text()
    assert "ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.1/32 bash scripts/start.sh" in readme
    assert "archiver add http://127.0.0.1:8001/" in readme

    opened = start(checkout, port, ARCHIVER_CRAWL_ALLOW_NETWORKS="127.0.0.1/32")
    assert opened.returncode == 0, opened.stderr
    assert "127.0.0.1:8001" not in opened.stderr  # networks are open: no need to say how


def test_start_serves_the_replay_origin_and_stops_when_its_port_is_taken(checkout):
    with socket.socket() as holder:
        holder.bind(("127.0.0.2", 0))
        holder.listen()
        replay_port = holder.getsockname()[1]
        result = start(checkout, free_port("127.0.0.1"), ARCHIVER_REPLAY_URL=f"http://127.0.0.2:{replay_port}")
    assert result.returncode == 1
    assert (f"[start] the replay server (gunicorn) cannot serve 127.0.0.2:{replay_port}: another program "
            "has it (another address: ARCHIVER_REPLAY_URL, docs/configuration.md)") in result.stderr.splitlines()
    assert "run --daemon" not in archiver_calls(checkout)
    started = start(checkout, free_port("127.0.0.1"))
    assert started.returncode == 0, started.stderr
    assert "[start] replay: http://127.0.0.2:" in started.stderr


def test_a_terminated_start_stops_its_daemon_and_servers_instead_of_orphaning_them(checkout):
    # A service manager or `kill PID` stops the script, not its foreground child: the daemon
    # once lived on, holding its leases and the embedded Redis, with nobody to stop it.
    calls = checkout / "archiver-calls"
    # The fake daemon sets its trap and writes its pid before its call is logged: the test
    # signals once it sees the call (it once did so before the trap, at load 8, and the
    # daemon died of the TERM it was meant to catch).
    executable(checkout / ".venv" / "bin" / "archiver", f"""if [ "$1" = run ]; then
    trap 'echo "daemon stopped by TERM" >> {calls}; exit 0' TERM
    echo $$ > {checkout / "daemon.pid.new"} && mv {checkout / "daemon.pid.new"} {checkout / "daemon.pid"}
fi
echo "$*" >> {calls}
if [ "$1" = run ]; then
    while :; do sleep 0.1; done
fi""")
    environ = start_env(checkout)
    script = subprocess.Popen([BASH, str(checkout / "scripts" / "start.sh")], env=environ,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: "run --daemon" in archiver_calls(checkout), 60, 0.1, "the daemon started")
        servers = [int((checkout / "data" / "run" / name).read_text()) for name in ("gunicorn.pid", "replay.pid")]
        script.terminate()
        assert script.wait(timeout=30) == 0  # the daemon stopped cleanly, and so did the script
        assert "daemon stopped by TERM" in archiver_calls(checkout)
        wait_for(lambda: not any(alive(pid) for pid in servers), 30, 0.1, "the servers stopped")
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        daemon = checkout / "daemon.pid"
        pid = daemon.read_text().strip() if daemon.exists() else ""
        if pid.isdigit() and alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


def start_env(checkout: Path) -> dict[str, str]:
    """start.sh's environment: none of ours, free ports, the checkout's data dir."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    environ.update(ARCHIVER_PORT=str(free_port("127.0.0.1")), ARCHIVER_DATA_DIR=str(checkout / "data"),
                   PYTHONPATH=str(REPO), ARCHIVER_REPLAY_URL=f"http://127.0.0.2:{free_port('127.0.0.2')}")
    return environ


def looping_daemon(checkout: Path) -> None:
    """`archiver run` that stays up until TERM; every other call is only recorded."""
    calls = checkout / "archiver-calls"
    executable(checkout / ".venv" / "bin" / "archiver", f"""if [ "$1" = run ]; then
    trap 'exit 0' TERM  # before the call is recorded: a test may signal once it sees it
fi
echo "$*" >> {calls}
if [ "$1" = run ]; then
    while :; do sleep 0.1; done
fi""")


def test_a_second_start_on_a_data_dir_in_use_refuses_before_touching_anything_and_names_the_pid(checkout):
    looping_daemon(checkout)
    environ = start_env(checkout)
    first = subprocess.Popen([BASH, str(checkout / "scripts" / "start.sh")], env=environ,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: "run --daemon" in archiver_calls(checkout), 60, 0.1, "the first start's daemon")
        calls = archiver_calls(checkout)
        second = start(checkout, free_port("127.0.0.1"))
        assert second.returncode == 1
        assert second.stderr == (f"[start] {checkout / 'data'} is in use by scripts/start.sh (pid {first.pid}): "
                                 "stop it first, or give this one another ARCHIVER_DATA_DIR\n")
        assert archiver_calls(checkout) == calls  # no migrate, collectstatic or ensureadmin
    finally:
        first.terminate()
        first.wait(timeout=30)


def test_start_refuses_a_data_dir_whose_runner_lock_a_daemon_holds(checkout):
    import fcntl

    (checkout / "data" / "run").mkdir(parents=True)
    with open(checkout / "data" / "run" / "runner.lock", "a+") as lock:  # as acquire_runner_lock does
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("4242\n")
        lock.flush()
        result = start(checkout, free_port("127.0.0.1"))
    assert result.returncode == 1
    assert result.stderr == (f"[start] {checkout / 'data'} is in use by an archiver daemon (pid 4242): "
                             "stop it first, or give this one another ARCHIVER_DATA_DIR\n")
    assert archiver_calls(checkout) == []
    assert start(checkout, free_port("127.0.0.1")).returncode == 0  # the lock released: it starts


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
