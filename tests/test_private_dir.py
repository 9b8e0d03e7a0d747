"""The data dir is private (0700 folders, 0600 files), a start-up check says when something
widened it, and commands other than `migrate` never create one."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from archiver import conf
from crawls import checks

REPO = Path(__file__).resolve().parent.parent


def manage(*args, data_dir: Path | None, cwd: Path = REPO, umask: int = 0o022) -> subprocess.CompletedProcess:
    """`python manage.py ...` started with a permissive umask, as from a typical shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    env["PYTHONPATH"] = str(REPO)
    if data_dir is not None:
        env["ARCHIVER_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=120, preexec_fn=lambda: os.umask(umask),
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_dir_and_everything_in_it_are_private_to_the_user(tmp_path):
    data_dir = tmp_path / "srv" / "archiver"
    assert manage("migrate", "-v0", data_dir=data_dir).returncode == 0
    assert manage("ensureadmin", data_dir=data_dir).returncode == 0
    assert manage("add", "https://example.com/", data_dir=data_dir).returncode == 0
    assert manage("collectstatic", "--noinput", "-v0", data_dir=data_dir).returncode == 0
    assert mode(data_dir) == 0o700
    files = [p for p in data_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"archiver.sqlite3", "secret_key", "admin-password"}
    widened = {str(p.relative_to(data_dir)): oct(mode(p)) for p in [data_dir, *data_dir.rglob("*")]
               if mode(p) & 0o077}
    assert widened == {}


def test_the_start_up_check_names_each_widened_path_and_the_chmod_that_fixes_it(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    (data_dir / "run").mkdir(parents=True)
    (data_dir / "redis" / "appendonlydir").mkdir(parents=True)
    (data_dir / "archives" / "c1").mkdir(parents=True)
    files = ("secret_key", "admin-password", "run/redis.json", "redis/redis.conf", "redis/dump.rdb")
    for name in files:
        (data_dir / name).write_text("x")
        os.chmod(data_dir / name, 0o644)
    (data_dir / "archives" / "c1" / "a.wacz").write_text("x")  # inside a private folder: fine
    os.chmod(data_dir / "archives" / "c1" / "a.wacz", 0o644)
    for name, bits in (("", 0o755), ("run", 0o750), ("redis/appendonlydir", 0o755), ("archives", 0o711)):
        os.chmod(data_dir / name, bits)
    monkeypatch.setattr(conf, "get", lambda: conf.Settings(data_dir=data_dir))
    warnings = checks.check_private_data_dir(None)
    assert {w.hint for w in warnings} == {
        *(f"chmod 700 {data_dir / name}" for name in ("", "run", "redis/appendonlydir", "archives")),
        *(f"chmod 600 {data_dir / name}" for name in files),
    }
    assert all(w.id == "archiver.W002" and "readable by other users" in w.msg for w in warnings)
    for warning in warnings:
        subprocess.run(warning.hint.split(), check=True)
    assert checks.check_private_data_dir(None) == []


def test_a_widened_database_is_reported_when_any_command_starts(tmp_path):
    data_dir = tmp_path / "data"
    assert manage("migrate", "-v0", data_dir=data_dir).returncode == 0
    os.chmod(data_dir / "archiver.sqlite3", 0o644)
    result = manage("status", data_dir=data_dir)
    assert result.returncode == 0
    assert f"{data_dir / 'archiver.sqlite3'} is readable by other users (mode 0644)" in result.stderr
    assert f"chmod 600 {data_dir / 'archiver.sqlite3'}" in result.stderr


COMMANDS = [
    ["status"], ["status", "--json"], ["org", "list"], ["webhook", "list"], ["webhook", "deliveries"],
    ["schedule", "list"], ["add", "https://example.com/"], ["pause", "abc"], ["ensureadmin"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_a_command_run_where_there_is_no_data_dir_says_where_it_looked_and_creates_nothing(tmp_path, args):
    result = manage(*args, data_dir=None, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"CommandError: no archiver database in {tmp_path / 'data'} ({tmp_path / 'data' / 'archiver.sqlite3'} "
        f"does not exist): set ARCHIVER_DATA_DIR to your data dir, or run `archiver migrate` to start one there\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_data_dir_without_a_database_gets_none(tmp_path):
    result = manage("status", data_dir=tmp_path)
    assert result.returncode == 1 and "ARCHIVER_DATA_DIR" in result.stderr
    assert not (tmp_path / "archiver.sqlite3").exists()


def test_two_commands_started_at_once_on_a_new_data_dir_share_one_secret_key(tmp_path, monkeypatch):
    """The daemon and `add` started together: the one that loses the race to create the key
    reads the winner's instead of crashing (a flaky CI failure, reproduced here)."""
    from archiver import settings as archiver_settings

    monkeypatch.setattr(archiver_settings, "DATA_DIR", tmp_path)
    monkeypatch.delenv("ARCHIVER_SECRET_KEY", raising=False)
    real_open = os.open

    def the_other_wrote_it_first(path, flags, mode=0o777):
        if Path(path).name == "secret_key":
            Path(path).write_text("theirs")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", the_other_wrote_it_first)
    assert archiver_settings._secret_key() == "theirs"
