"""`archiver doctor`: one line per check against the real engine and Redis; each broken part
(engine away or hung, image missing, Redis down, disk nearly full, data dir widened) gives
exactly one failed line with its fix, and exit 1."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from archiver.conf import CRAWLER_VERSION, Settings
from runner import doctor
from tests.ports import refused_port
from tests.runner.engine_sockets import HungEngine
from tests.waiting import HANG

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def manage(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    return subprocess.run([sys.executable, str(REPO / "manage.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**clean, "PYTHONPATH": str(REPO), **env})


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """A data dir with its database migrated once; each test gets a copy."""
    data_dir = tmp_path_factory.mktemp("doctor") / "data"
    result = manage("migrate", "-v0", env={"ARCHIVER_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr
    return data_dir


@pytest.fixture
def healthy(migrated, redis_server, crawler_image, docker_client):
    """The environment of a set-up where every check passes: the test then breaks one part."""
    data_dir = Path(tempfile.mkdtemp(prefix="adoc-", dir="/tmp")) / "data"
    shutil.copytree(migrated, data_dir)
    os.chmod(data_dir, 0o700)
    yield {"ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_REDIS_URL": redis_server.url(0),
           "ARCHIVER_CRAWLER_IMAGE": crawler_image, "ARCHIVER_LAUNCHER": "docker",
           "ARCHIVER_CHROMIUM": "none",  # the shared test image may predate its Chromium
           "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")}
    shutil.rmtree(data_dir.parent, ignore_errors=True)


def doctor_lines(env: dict[str, str]) -> tuple[int, list[str], float]:
    """Doctor's exit code, its check lines (after the settings it names first) and its time."""
    started = time.monotonic()
    result = manage("doctor", env=env)
    took = time.monotonic() - started
    assert result.stderr == "", result.stderr
    settings, blank, checks = result.stdout.partition("\n\n")
    assert settings.startswith("Settings: ") and blank, result.stdout
    return result.returncode, checks.splitlines(), took


def failed_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("✗")]


def test_every_check_passes_against_the_real_engine_and_redis(healthy, crawler_image):
    code, lines, _ = doctor_lines(healthy)
    assert code == 0, lines
    assert [line.split(":")[0] for line in lines[:-1]] == [
        "✓ database", "✓ redis", "✓ docker engine", "✓ crawler image", "✓ browser", "✓ disk", "✓ data dir",
        "✓ signing"]
    assert lines[-1] == "All 8 checks passed."
    assert lines[7].startswith("✓ signing: no key yet: archiver makes one in the data dir when it first signs")
    assert lines[3] == (f"✓ crawler image: {crawler_image}: archiver's own crawler (HTTP, or Chromium in browser mode), "
                        f"version {CRAWLER_VERSION} (from the image's labels)")
    assert "migrations applied" in lines[0] and "answers" in lines[1] and "mode 0700" in lines[6]
    assert lines[4] == "✓ browser: ARCHIVER_CHROMIUM=none: new crawls default to HTTP mode (--browser is refused)"


def test_an_engine_nobody_serves_is_one_failed_line_with_its_fix(healthy, tmp_path):
    dead = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(dead))  # a socket file, never listened on: connections are refused
    code, lines, took = doctor_lines({**healthy, "DOCKER_HOST": f"unix://{dead}"})
    assert code == 1
    assert failed_lines(lines) == [
        f"✗ docker engine: unix://{dead} refuses connections (no engine listens there) — fix: start the "
        f"engine (or scripts/docker-engine.sh start), point DOCKER_HOST at it, or set ARCHIVER_LAUNCHER=local"]
    assert f"– crawler image: {healthy['ARCHIVER_CRAWLER_IMAGE']}: not checked without an engine" in lines
    assert "– browser: the image's Chromium: not checked without an engine" in lines
    assert lines[-1] == "1 of 8 checks failed."


def test_a_hung_engine_is_one_failed_line_within_the_docker_timeout(healthy, tmp_path):
    engine = HungEngine(tmp_path / "hung.sock")
    try:
        code, lines, took = doctor_lines({**healthy, "DOCKER_HOST": f"unix://{engine.path}",
                                          "ARCHIVER_DOCKER_TIMEOUT": "1"})
    finally:
        engine.close()
    assert code == 1
    (line,) = failed_lines(lines)
    assert line.startswith(f"✗ docker engine: unix://{engine.path} does not answer within 1 s (")
    assert "— fix: start the engine" in line
    # Django's start-up plus one bounded request; the bound only tells that from a hang (an
    # unbounded request to this engine would never return at all).
    assert took < HANG


@pytest.mark.parametrize(("image", "fix"), [
    ("archiver/crawler:does-not-exist", "build it with scripts/build-crawler-image.sh"),
    ("127.0.0.1:1/someone/crawler:1", "run `archiver pull` (or `docker pull 127.0.0.1:1/someone/crawler:1`)"),
])
def test_a_missing_image_is_one_failed_line_saying_how_to_get_it(healthy, docker_client, image, fix):
    code, lines, _ = doctor_lines({**healthy, "ARCHIVER_CRAWLER_IMAGE": image})
    assert code == 1
    assert failed_lines(lines) == [f"✗ crawler image: {image} is not on the Docker engine — fix: {fix}"]
    assert docker_client.images.list(name=image) == []  # never pulled


def test_redis_down_is_one_failed_line_with_its_fix(healthy):
    with refused_port() as port:
        code, lines, _ = doctor_lines({**healthy, "ARCHIVER_REDIS_URL": f"redis://:s3cret-pw@127.0.0.1:{port}/0"})
    assert code == 1
    assert failed_lines(lines) == [
        f"✗ redis: Redis at 127.0.0.1:{port} (ARCHIVER_REDIS_URL) does not answer within 2 s "
        f"(ConnectionError) — fix: start that Redis server, or correct ARCHIVER_REDIS_URL"]
    assert "s3cret" not in "\n".join(lines)


@contextlib.contextmanager
def small_filesystem(path: Path, size_kib: int = 8192):
    """A small tmpfs at `path`; skips where mounting is not allowed (not root)."""
    path.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0700", "tmpfs", str(path)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill_to(path: Path, percent: float) -> None:
    usage = shutil.disk_usage(path)
    total = usage.used + usage.free
    (path / "filler").write_bytes(b"\0" * int(total * percent / 100 - usage.used))


def test_a_nearly_full_disk_is_one_failed_line_with_its_fix(healthy, migrated, tmp_path):
    with small_filesystem(tmp_path / "small") as small:
        data_dir = small / "data"
        shutil.copytree(migrated, data_dir)
        fill_to(small, 95)
        code, lines, _ = doctor_lines({**healthy, "ARCHIVER_DATA_DIR": str(data_dir)})
    assert code == 1
    (line,) = failed_lines(lines)
    assert line.startswith("✗ disk: 9")
    assert "% used, at or over the 90 % where crawls pause (" in line and f"under {data_dir})" in line
    assert line.endswith("— fix: free space on that filesystem, or raise ARCHIVER_DISK_THRESHOLD (now 90)")


def test_a_threshold_under_the_real_use_is_reported_the_same_way(healthy):
    usage = shutil.disk_usage(healthy["ARCHIVER_DATA_DIR"])
    used = 100 * usage.used / (usage.used + usage.free)
    if used < 1:
        pytest.skip("the disk is almost empty")
    code, lines, _ = doctor_lines({**healthy, "ARCHIVER_DISK_THRESHOLD": f"{int(used)}"})
    assert code == 1
    (line,) = failed_lines(lines)
    assert line.startswith("✗ disk: ") and f"raise ARCHIVER_DISK_THRESHOLD (now {int(used)})" in line


def test_a_widened_data_dir_is_one_failed_line_with_the_chmod(healthy):
    data_dir = Path(healthy["ARCHIVER_DATA_DIR"])
    os.chmod(data_dir, 0o755)
    os.chmod(data_dir / "archiver.sqlite3", 0o644)
    code, lines, _ = doctor_lines(healthy)
    assert code == 1
    (line,) = failed_lines(lines)
    # SQLite gives its -wal and -shm files the database's mode: they may count too.
    assert line.startswith(f"✗ data dir: {data_dir}: mode 0755, not 0700; ")
    assert f"path(s) inside readable by other users (first: {data_dir / 'archiver.sqlite3'})" in line
    assert line.endswith(f"— fix: chmod 700 {data_dir}; chmod them 700 (folders) or 600 (files); "
                         f"`archiver check` lists each")


def test_no_database_is_reported_without_creating_one(healthy, tmp_path):
    data_dir = tmp_path / "empty"
    data_dir.mkdir(mode=0o700)
    code, lines, _ = doctor_lines({**healthy, "ARCHIVER_DATA_DIR": str(data_dir)})
    assert code == 1
    assert failed_lines(lines) == [f"✗ database: no database at {data_dir / 'archiver.sqlite3'} — fix: run "
                                   f"`archiver migrate`, or set ARCHIVER_DATA_DIR to your data dir"]
    assert not (data_dir / "archiver.sqlite3").exists()


# --- the checks as functions -------------------------------------------------------------------


def test_an_embedded_redis_that_is_not_running_is_fine_the_daemon_starts_it(tmp_path):
    finding = doctor.check_redis(Settings(data_dir=tmp_path))
    assert finding.status == "ok"
    assert finding.text.startswith("the embedded Redis is not running: `archiver run` starts it")


def test_a_data_dir_owned_by_someone_else_says_to_chown_it(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(data_dir).st_uid + 4242)
    finding = doctor.check_data_dir(Settings(data_dir=data_dir))
    assert finding.failed and f"chown -R uid {os.stat(data_dir).st_uid + 4242} {data_dir}" in finding.fix


def test_the_crawler_is_named_from_the_image_labels():
    assert doctor.crawler_kind("webrecorder/browsertrix-crawler:1.14.1", {}) == \
        "webrecorder's browsertrix-crawler (a browser)"
    assert doctor.crawler_kind("mirror.example/btrix:1", {
        "org.opencontainers.image.source": "https://github.com/webrecorder/browsertrix-crawler"}) == \
        "webrecorder's browsertrix-crawler (a browser)"
    assert doctor.crawler_kind("x:1", {"org.opencontainers.image.title": "archiver-crawler"}).startswith(
        "archiver's own crawler")
    assert "does not know" in doctor.crawler_kind("someone/else:1", {})


def test_an_unreachable_database_server_is_one_failed_line_without_its_password(healthy):
    with refused_port() as port:
        code, lines, _ = doctor_lines({**healthy, "ARCHIVER_DATABASE_URL": f"postgres://u:s3cret-pw@127.0.0.1:{port}/x"})
    assert code == 1
    (line,) = failed_lines(lines)
    assert line.startswith(f"✗ database: postgresql 127.0.0.1:{port}/x does not answer: ")
    assert line.endswith("— fix: check ARCHIVER_DATABASE_URL and that the database server runs")
    assert "s3cret" not in "\n".join(lines)


@pytest.fixture
def unlabelled_image(docker_client, crawler_image):
    """The crawler image with its version label emptied and the real crawler's source label."""
    tag = f"archiver/test-doctor-unlabelled:{secrets.token_hex(4)}"
    context = Path(tempfile.mkdtemp(prefix="unlabelled-"))
    (context / "Dockerfile").write_text(
        f"FROM {crawler_image}\n"
        'LABEL org.opencontainers.image.version="" org.opencontainers.image.title="" '
        'org.opencontainers.image.source="https://github.com/webrecorder/browsertrix-crawler"\n')
    try:
        docker_client.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def test_an_image_without_a_version_label_is_asked_with_crawl_version(healthy, unlabelled_image, docker_client):
    code, lines, _ = doctor_lines({**healthy, "ARCHIVER_CRAWLER_IMAGE": unlabelled_image})
    assert code == 0, lines
    assert lines[3] == (f"✓ crawler image: {unlabelled_image}: webrecorder's browsertrix-crawler (a browser), "
                        f"version {CRAWLER_VERSION} (from `crawl --version`)")
    assert docker_client.containers.list(all=True, filters={"ancestor": unlabelled_image}) == []


# --- the browser of archiver's own crawler -----------------------------------------------------


def script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_the_local_chromium_its_version_and_the_default_mode_are_said(tmp_path):
    chromium = script(tmp_path / "chromium", "echo 'Chromium 120.0.6099.224 built on Debian 12'")
    finding = doctor.check_local_browser(Settings(launcher="local", chromium=chromium))
    assert finding.status == "ok"
    assert finding.text == (f"{chromium}: Chromium 120.0.6099.224 built on Debian 12; new crawls default to "
                            "browser mode (add --no-browser for HTTP only)")


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="no Chromium at /usr/bin/chromium")
def test_the_real_chromium_answers_with_its_version():
    finding = doctor.check_local_browser(Settings(launcher="local", chromium="/usr/bin/chromium"))
    assert finding.status == "ok" and "Chromium" in finding.text, finding


def test_no_chromium_a_broken_one_and_none_are_each_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing called chromium on it
    monkeypatch.setattr(doctor, "VERSION_TIMEOUT", 1.0)
    if Path("/usr/bin/chromium").exists():
        monkeypatch.setattr("archiver.options.launchers.CHROMIUM_NAMES", ("chromium", "chromium-browser"))
    found = doctor.check_local_browser(Settings(launcher="local"))
    assert found.status == "ok" and "no Chromium found" in found.text and "HTTP mode" in found.text
    gone = doctor.check_local_browser(Settings(launcher="local", chromium=str(tmp_path / "gone")))
    assert gone.failed and "is not an executable file" in gone.text
    hung = script(tmp_path / "hung", f"exec sleep {2 * HANG:g}")
    started = time.monotonic()
    assert doctor.check_local_browser(Settings(launcher="local", chromium=hung)).failed
    assert time.monotonic() - started < HANG  # its 1 s timeout, not the browser's sleep
    off = doctor.check_local_browser(Settings(launcher="local", chromium="none"))
    assert off.status == "ok" and "default to HTTP mode" in off.text
