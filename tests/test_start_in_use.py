"""A second scripts/start.sh on a data dir a real instance is using (issue 41): it ran
migrate, `collectstatic --clear` and ensureadmin against the live instance, then said "the
admin (gunicorn) did not start". Now it stops before touching anything and names the pid.

The instance is real: start.sh's own `archiver` commands (migrate, collectstatic, ensureadmin,
the daemon on the local launcher and its embedded Redis) and both gunicorns; the `archiver`
of the copied checkout only notes each call before running this virtualenv's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.installation import Installation
from tests.ports import free_port
from tests.runner.helpers import stop_processes_of
from tests.test_scripts import BASH, alive, checkout, executable, start, start_env  # noqa: F401 - checkout is a fixture
from tests.waiting import wait_for

ARCHIVER = Path(sys.executable).with_name("archiver")


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Each file under `folder`: its inode, size and modification time (a file replaced,
    rewritten or touched differs)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            info = path.stat()
            found[str(path.relative_to(folder))] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return found


def test_a_second_start_on_a_live_instance_changes_nothing_and_names_its_pid(checkout):  # noqa: F811
    calls = checkout / "archiver-calls"
    executable(checkout / ".venv" / "bin" / "archiver", f'echo "$*" >> {calls}\nexec {ARCHIVER} "$@"')
    data = checkout / "data"
    Installation(data).migrate(static=True)  # start.sh's migrate then has nothing to do: seconds, not minutes
    environ = {**start_env(checkout), "ARCHIVER_LAUNCHER": "local", "ARCHIVER_CHROMIUM": "none"}
    log = checkout / "first-start.log"
    with open(log, "wb") as output:
        first = subprocess.Popen([BASH, str(checkout / "scripts" / "start.sh")], env=environ,
                                 stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: daemon_holds_its_lock(data) or first.poll() is not None, 180, 0.2,
                 "the first instance's daemon", explain=log.read_text)
        assert first.poll() is None, log.read_text()
        assert calls.read_text().splitlines()[-1] == "run --daemon"
        before = calls.read_text()
        static, kept_files = snapshot(data / "static"), kept(data)
        assert len(static) > 10, "collectstatic put the admin's files there"

        second = start(checkout, free_port("127.0.0.1"), ARCHIVER_LAUNCHER="local", ARCHIVER_CHROMIUM="none")

        assert second.returncode == 1
        assert second.stderr == (f"[start] {data} is in use by scripts/start.sh (pid {first.pid}): "
                                 "stop it first, or give this one another ARCHIVER_DATA_DIR\n")
        assert calls.read_text() == before  # no migrate, collectstatic --clear or ensureadmin
        assert snapshot(data / "static") == static  # not cleared and collected again
        assert kept(data) == kept_files  # the database, its settings and the admin's password
        assert first.poll() is None, "the first instance runs on"
    finally:
        first.terminate()
        try:
            first.wait(timeout=60)
        finally:
            stop_processes_of(data)


def daemon_holds_its_lock(data: Path) -> bool:
    lock = data / "run" / "runner.lock"
    return lock.exists() and subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0


def kept(data: Path) -> dict[str, tuple[int, int, int]]:
    """The files of the data dir a second start would write: the SQLite database (migrate,
    ensureadmin), archiver.env and the admin's password file."""
    names = ("archiver.sqlite3", "archiver.env", "admin-password")
    return {name: value for name, value in snapshot(data).items() if name in names}



def test_a_start_killed_outright_leaves_its_servers_named_not_its_own_pid(checkout):  # noqa: F811
    # What start.sh started inherits its lock: killed with -9, it named its own pid, which
    # nobody can stop any more, while its servers and daemon ran on.
    calls, daemon_pid = checkout / "archiver-calls", checkout / "daemon.pid"
    executable(checkout / ".venv" / "bin" / "archiver", f"""echo "$*" >> {calls}
if [ "$1" = run ]; then
    echo $$ > {daemon_pid}
    trap 'exit 0' TERM
    while :; do sleep 0.1; done
fi""")
    first = subprocess.Popen([BASH, str(checkout / "scripts" / "start.sh")], env=start_env(checkout),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = checkout / "data" / "run"
    left: list[int] = []
    try:
        wait_for(lambda: daemon_pid.exists() and daemon_pid.read_text().strip(), 60, 0.1, "the first start's daemon")
        left = [int((run / name).read_text()) for name in ("gunicorn.pid", "replay.pid")]
        left.append(int(daemon_pid.read_text()))
        first.kill()
        first.wait(timeout=30)
        before = calls.read_text()

        second = start(checkout, free_port("127.0.0.1"))

        assert second.returncode == 1
        assert second.stderr == (f"[start] {checkout / 'data'} is in use by what a scripts/start.sh that has ended "
                                 f"left running (pid {left[0]} {left[1]}: its daemon and servers): stop it first, "
                                 "or give this one another ARCHIVER_DATA_DIR\n")
        assert calls.read_text() == before
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not any(alive(pid) for pid in left), 60, 0.1, "what the first start left stopped")
