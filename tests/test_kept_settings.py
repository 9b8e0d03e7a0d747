"""One configuration for every process (issue 41): what scripts/start.sh is given is kept in
<data dir>/archiver.env (0600), read by every process under its environment, and said by
`archiver doctor` with where each value came from; never a secret's value."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from archiver import conf
from archiver.errors import ConfigError
from archiver.options import kept

REPO = Path(__file__).resolve().parent.parent
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """This process's environment with no ARCHIVER_* variable but the data dir's."""
    for name in list(os.environ):
        if name.startswith("ARCHIVER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ARCHIVER_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def keep(data_dir: Path, **given: str) -> tuple[Path, list[str]]:
    return conf.keep({"ARCHIVER_DATA_DIR": str(data_dir), **given})


def test_what_start_gives_is_kept_in_a_private_file_of_the_data_dir(data_dir):
    path, names = keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000",
                       ARCHIVER_CRAWL_ALLOW_NETWORKS="127.0.0.1/32", ARCHIVER_WEBHOOK_ALLOW_HOSTS="127.0.0.1:8765",
                       ARCHIVER_PORT="8080", ARCHIVER_TEST_WORKERS="4")
    assert path == data_dir / "archiver.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert names == ["ARCHIVER_WEBHOOK_ALLOW_HOSTS", "ARCHIVER_CRAWL_ALLOW_NETWORKS", "ARCHIVER_REPLAY_URL",
                     "ARCHIVER_PORT"]  # a test's or a typo's variable is no setting: not kept
    assert "ARCHIVER_REPLAY_URL=http://127.0.0.3:9000\n" in path.read_text()
    assert "ARCHIVER_DATA_DIR" not in path.read_text()  # the file is found through it


def test_a_later_start_replaces_what_it_gives_removes_what_it_empties_and_keeps_the_rest(data_dir):
    keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000", ARCHIVER_CRAWL_ALLOW_NETWORKS="127.0.0.1/32")
    path, names = keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.4:9000", ARCHIVER_CRAWL_ALLOW_NETWORKS="",
                       ARCHIVER_LOG_LEVEL="WARNING")
    assert names == ["ARCHIVER_REPLAY_URL", "ARCHIVER_LOG_LEVEL"]
    assert kept.read(path) == {"ARCHIVER_REPLAY_URL": "http://127.0.0.4:9000", "ARCHIVER_LOG_LEVEL": "WARNING"}
    os.chmod(path, 0o644)  # widened by hand: the next write is private again
    keep(data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(kept.read(path)) == 2


def test_a_bad_value_is_refused_before_anything_is_written_and_a_secret_never_shown(data_dir):
    keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000")
    before = (data_dir / "archiver.env").read_text()
    with pytest.raises(ConfigError, match="ARCHIVER_REPLAY_URL: must be http"):
        keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000/path")
    with pytest.raises(ConfigError, match="needs ARCHIVER_STORAGE_ENDPOINT") as refused:
        keep(data_dir, ARCHIVER_STORAGE_URL="s3://archives", ARCHIVER_STORAGE_ACCESS_KEY="AKIDEXAMPLE",
             ARCHIVER_STORAGE_SECRET_KEY=SECRET)
    assert SECRET not in str(refused.value)
    with pytest.raises(ConfigError, match="ARCHIVER_INSTANCE_ID holds a line break"):
        keep(data_dir, ARCHIVER_INSTANCE_ID="one\nARCHIVER_STORAGE_URL=s3://elsewhere")
    assert (data_dir / "archiver.env").read_text() == before


def test_every_process_reads_the_file_and_its_environment_wins(data_dir, monkeypatch):
    keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000", ARCHIVER_CRAWL_ALLOW_NETWORKS="127.0.0.1/32",
         ARCHIVER_MAX_CONCURRENT_CRAWLS="7")
    settings = conf.from_environ()
    assert (settings.replay_url, settings.crawl_allow_networks, settings.max_concurrent_crawls) == (
        "http://127.0.0.3:9000", ("127.0.0.1/32",), 7)
    monkeypatch.setenv("ARCHIVER_REPLAY_URL", "http://127.0.0.4:9001")
    monkeypatch.setenv("ARCHIVER_MAX_CONCURRENT_CRAWLS", "")  # empty: the default, whatever the file says
    settings = conf.from_environ()
    assert (settings.replay_url, settings.max_concurrent_crawls) == ("http://127.0.0.4:9001", 2)
    assert settings.crawl_allow_networks == ("127.0.0.1/32",)
    origins = conf.environment().origins
    assert origins["ARCHIVER_REPLAY_URL"] == kept.ENVIRONMENT
    assert origins["ARCHIVER_CRAWL_ALLOW_NETWORKS"] == str(data_dir / "archiver.env")
    assert origins["ARCHIVER_LAUNCHER"] == kept.DEFAULT
    assert conf.from_environ({"ARCHIVER_DATA_DIR": str(data_dir)}).replay_url == "http://127.0.0.2:8090"  # a given mapping is all


@pytest.mark.parametrize("line, message", [
    ("ARCHIVER_DATA_DIR=/elsewhere", "line 2: ARCHIVER_DATA_DIR cannot be set in the data dir's own file"),
    ("ARCHIVER_REPLAY_URLS=x", "line 2: 'ARCHIVER_REPLAY_URLS' is not an archiver setting"),
    ("export ARCHIVER_REPLAY_URL=x", "line 2: 'export ARCHIVER_REPLAY_URL' is not an archiver setting"),
    ("ARCHIVER_LAUNCHER=local", "line 2: ARCHIVER_LAUNCHER is set twice"),
])
def test_a_file_archiver_did_not_write_stops_every_command_naming_its_line(data_dir, line, message):
    data_dir.mkdir()
    (data_dir / "archiver.env").write_text(f"ARCHIVER_LAUNCHER=local\n{line}\n")
    with pytest.raises(ConfigError, match=message):
        conf.from_environ()


def test_a_bad_value_in_the_file_names_the_file_and_a_secret_in_it_is_never_quoted(data_dir):
    data_dir.mkdir()
    path = data_dir / "archiver.env"
    path.write_text("ARCHIVER_MAX_CONCURRENT_CRAWLS=lots\n")
    with pytest.raises(ConfigError) as refused:
        conf.from_environ()
    assert str(refused.value).startswith("ARCHIVER_MAX_CONCURRENT_CRAWLS: ")
    assert str(refused.value).endswith(f"(got 'lots', from {path})")
    path.write_text(f"ARCHIVER_STORAGE_URL=s3://Bad_Bucket\nARCHIVER_STORAGE_SECRET_KEY={SECRET}\n"
                    f"ARCHIVER_SECRET_KEY={SECRET}\n")
    with pytest.raises(ConfigError) as refused:
        conf.from_environ()
    assert "ARCHIVER_STORAGE_URL" in str(refused.value) and SECRET not in str(refused.value)


def test_the_account_of_the_settings_names_each_source_and_no_secret(data_dir, monkeypatch):
    keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000", ARCHIVER_SECRET_KEY=SECRET,
         ARCHIVER_DATABASE_URL="postgres://archiver:hunter2hunter2@127.0.0.1:5432/archiver")
    monkeypatch.setenv("ARCHIVER_LAUNCHER", "local")
    lines = kept.described(conf.environment())
    assert lines[:2] == [f"Settings: the environment over {data_dir / 'archiver.env'}, then defaults:",
                         f"  data dir {data_dir} (ARCHIVER_DATA_DIR, environment)"]
    assert "  ARCHIVER_LAUNCHER=local (environment)" in lines
    assert "  ARCHIVER_REPLAY_URL=http://127.0.0.3:9000 (archiver.env)" in lines
    assert "  ARCHIVER_SECRET_KEY=(a secret, not shown) (archiver.env)" in lines
    assert "  ARCHIVER_DATABASE_URL=postgres://***@127.0.0.1:5432/archiver (archiver.env)" in lines
    assert lines[-1].startswith("  default: ") and "ARCHIVER_REDIS_URL" in lines[-1]
    assert SECRET not in "\n".join(lines) and "hunter2" not in "\n".join(lines)


def django_setting(data_dir: Path, module: str, name: str, **env: str) -> str:
    """A Django setting as a fresh process with only the data dir in its environment sees it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    code = f"import django; from django.conf import settings; django.setup(); print(settings.{name})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                            env={**clean, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": module,
                                 "ARCHIVER_DATA_DIR": str(data_dir), **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_admin_and_the_replay_server_read_the_file_too(data_dir):
    keep(data_dir, ARCHIVER_REPLAY_URL="http://127.0.0.3:9000", ARCHIVER_ALLOWED_HOSTS="archive.example",
         ARCHIVER_LOG_LEVEL="WARNING")
    assert django_setting(data_dir, "archiver.replay_settings", "ALLOWED_HOSTS") == "['127.0.0.3']"
    assert "'archive.example'" in django_setting(data_dir, "archiver.settings", "ALLOWED_HOSTS")
    assert django_setting(data_dir, "archiver.settings", "LOGGING['root']['level']") == "WARNING"
    assert django_setting(data_dir, "archiver.settings", "LOGGING['root']['level']",
                          ARCHIVER_LOG_LEVEL="ERROR") == "ERROR"


@pytest.mark.parametrize("name, value, shown", [
    ("ARCHIVER_REDIS_URL", "redis://127.0.0.1:6379/0?password=hunter2hunter2",
     "redis://127.0.0.1:6379/0?password=***"),
    ("ARCHIVER_REDIS_URL", "unix:///run/redis.sock?db=2&password=hunter2hunter2",
     "unix:///run/redis.sock?db=***&password=***"),
    ("ARCHIVER_DATABASE_URL", "postgres://archiver:pw@127.0.0.1:5432/archiver?password=hunter2hunter2",
     "postgres://***@127.0.0.1:5432/archiver?password=***"),
    ("ARCHIVER_SIGNING_URL", "http://127.0.0.1:9/sign?token=hunter2hunter2", "http://127.0.0.1:9/sign?token=***"),
    ("ARCHIVER_DATABASE_URL", "postgres://archiver:hunter2@hunter2@127.0.0.1/archiver",
     "postgres://***@127.0.0.1/archiver"),  # an unescaped "@" in the password
    ("ARCHIVER_CRAWL_ALLOW_NETWORKS", "127.0.0.1/32", "127.0.0.1/32"),
])
def test_doctor_masks_a_password_a_url_carries_in_its_query_too(data_dir, monkeypatch, name, value, shown):
    # A Redis or PostgreSQL URL may carry its password as ?password=: it was printed whole.
    monkeypatch.setenv(name, value)
    lines = kept.described(conf.environment())
    assert f"  {name}={shown} (environment)" in lines
    assert "hunter2" not in "\n".join(lines)
