"""scripts/start.sh keeps what it is given in the data dir's archiver.env, so a command in
another shell, with none of those variables, runs with the same settings (issue 41: the
replay URL, allowed networks and webhook hosts were unknown to `archiver` in a second shell,
and `collection link` printed a link on the default replay address)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.test_scripts import checkout, start  # noqa: F401 - checkout is a fixture

REPO = Path(__file__).resolve().parent.parent
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def second_shell(clone: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`archiver ARGS` in another shell in the clone: no ARCHIVER_* variable but those given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    return subprocess.run([sys.executable, str(REPO / "manage.py"), *args], cwd=clone, capture_output=True,
                          text=True, timeout=120, env={**clean, "PYTHONPATH": str(REPO), "NO_COLOR": "1", **env})


@pytest.fixture
def started(checkout) -> tuple[Path, str]:  # noqa: F811 - the fixture imported above
    """A clone whose start.sh was given a replay URL, networks, webhook hosts and a secret."""
    replay = f"http://127.0.0.2:{free_port('127.0.0.2')}"
    result = start(checkout, free_port("127.0.0.1"), ARCHIVER_REPLAY_URL=replay,
                   ARCHIVER_CRAWL_ALLOW_NETWORKS="127.0.0.1/32", ARCHIVER_WEBHOOK_ALLOW_HOSTS="127.0.0.1:8765",
                   ARCHIVER_LAUNCHER="local", ARCHIVER_CHROMIUM="none", ARCHIVER_SECRET_KEY=SECRET)
    assert result.returncode == 0, result.stderr
    path = checkout / "data" / "archiver.env"
    assert (f"[start] settings kept in {path} for every archiver command (ARCHIVER_LAUNCHER, "
            "ARCHIVER_WEBHOOK_ALLOW_HOSTS, ARCHIVER_CHROMIUM, ARCHIVER_CRAWL_ALLOW_NETWORKS, ARCHIVER_REPLAY_URL, "
            "ARCHIVER_SECRET_KEY, ARCHIVER_PORT); `archiver doctor` says where each comes from") in result.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"ARCHIVER_REPLAY_URL={replay}\n" in path.read_text()
    assert second_shell(checkout, "migrate", "-v0").returncode == 0
    return checkout, replay


def test_a_command_in_another_shell_runs_with_what_start_was_given(started):
    clone, replay = started
    assert second_shell(clone, "collection", "create", "Spring").returncode == 0
    link = second_shell(clone, "collection", "link", "Spring")
    assert link.returncode == 0, link.stderr
    assert link.stdout.splitlines()[-1].startswith(f"{replay}/c/pub_")
    # The address policy opened by start.sh: a site on this host is queued, not refused.
    added = second_shell(clone, "add", "http://127.0.0.1:8001/")
    assert added.returncode == 0, added.stderr


def test_an_environment_variable_in_that_shell_still_wins(started):
    clone, _ = started
    assert second_shell(clone, "collection", "create", "Spring").returncode == 0
    link = second_shell(clone, "collection", "link", "Spring", ARCHIVER_REPLAY_URL="http://127.0.0.3:9999")
    assert link.stdout.splitlines()[-1].startswith("http://127.0.0.3:9999/c/pub_"), link.stderr
    refused = second_shell(clone, "add", "http://127.0.0.1:8001/", ARCHIVER_CRAWL_ALLOW_NETWORKS="")
    assert refused.returncode == 1 and "127.0.0.1" in refused.stderr


def test_doctor_in_that_shell_says_where_each_setting_came_from_and_no_secret(started):
    clone, replay = started
    result = second_shell(clone, "doctor", ARCHIVER_LOG_LEVEL="ERROR")
    settings = result.stdout.split("\n\n")[0].splitlines()
    path = clone / "data" / "archiver.env"
    assert settings[:2] == [f"Settings: the environment over {path}, then defaults:",
                            f"  data dir {clone / 'data'} (default: ./data of the working directory)"]
    assert f"  ARCHIVER_REPLAY_URL={replay} (archiver.env)" in settings
    assert "  ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.1/32 (archiver.env)" in settings
    assert "  ARCHIVER_SECRET_KEY=(a secret, not shown) (archiver.env)" in settings
    assert "  ARCHIVER_LOG_LEVEL=ERROR (environment)" in settings
    assert settings[-1].startswith("  default: ARCHIVER_DATABASE_URL, ")
    assert SECRET not in result.stdout + result.stderr


def test_start_serves_the_admin_with_the_limits_the_tests_serve_it_with():
    # The admin's and the API's test servers take tests/installation.py's GUNICORN_LIMITS:
    # they must be what a user's start.sh gives gunicorn, or the tests judge another server.
    from tests.installation import GUNICORN_LIMITS

    script = (REPO / "scripts" / "start.sh").read_text()
    for flag, value in zip(GUNICORN_LIMITS[::2], GUNICORN_LIMITS[1::2], strict=True):
        assert f"{flag} {value}" in script, flag
