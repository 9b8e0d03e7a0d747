"""The management commands: what they print, what they write, and what they refuse.

Most tests call the commands in-process (call_command); the subprocess tests check what
a user at a shell sees: exit codes, one line on stderr, no traceback, nothing written.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.utils import timezone

from crawls.config import CrawlConfig
from crawls.models import (
    Crawl,
    CrawlFile,
    CrawlLog,
    CrawlStatus,
    Org,
    OrgUsage,
    Process,
    Snapshot,
    month_start,
)
from tests.waiting import HANG

S = CrawlStatus
REPO = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = {
    "id", "status", "stop_reason", "waiting_reason", "pages_found", "pages_done",
    "pages_failed", "size_bytes", "files", "org", "attempts", "created_at", "started_at",
    "finished_at",
}


@pytest.fixture
def nudges(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    monkeypatch.setattr("crawls.wake.nudge", lambda: calls.append(True) or False)
    return calls


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def row_counts() -> dict[str, int]:
    """Rows of every model of the crawls app and of auth: 'nothing written' means equal."""
    models = [*apps.get_app_config("crawls").get_models(), *apps.get_app_config("auth").get_models()]
    return {model.__name__: model.objects.count() for model in models}


def state(crawl: Crawl) -> tuple:
    crawl.refresh_from_db()
    return crawl.status, crawl.intent


@pytest.fixture
def make_crawl():
    def make(status=S.QUEUED, url="https://example.com/", org="default", **fields) -> Crawl:
        crawl = Crawl.create(Org.objects.get(slug=org), CrawlConfig(seeds=[url]))
        Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
        crawl.refresh_from_db()
        return crawl

    return make


# --- add -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_add_queues_a_crawl_prints_its_id_and_wakes_the_runner(nudges):
    out = run("add", "https://example.com/")
    crawl = Crawl.objects.get()
    assert out == f"{crawl.id}\n"
    assert crawl.status == S.QUEUED
    assert crawl.org.slug == "default"
    assert crawl.seeds == ["https://example.com/"]
    assert nudges == [True]


@pytest.mark.django_db
def test_add_stores_every_option_in_the_crawl_config(nudges):
    run("org", "set", "acme")
    run(
        "add", "https://example.com/a", "http://example.org/", "--depth", "3", "--limit", "500",
        "--size-limit", "500MB", "--time-limit", "30m", "--scope", "host",
        "--include", r"/blog/", "--include", r"/news/", "--exclude", r"\.pdf$", "--workers", "4",
        "--scale", "2", "--extra-hops", "1", "--user-agent", "archiver-test", "--use-robots",
        "--org", "acme", "--tag", "weekly", "--tag", "press",
    )
    crawl = Crawl.objects.get()
    assert crawl.config == {
        "seeds": ["https://example.com/a", "http://example.org/"], "scope_type": "host",
        "depth": 3, "extra_hops": 1, "page_limit": 500, "size_limit": 500_000_000,
        "time_limit": 1800, "include": ["/blog/", "/news/"], "exclude": [r"\.pdf$"],
        "workers": 4, "scale": 2, "user_agent": "archiver-test", "use_robots": True,
        "browser": False,  # auto, resolved: the tests' ARCHIVER_CHROMIUM=none finds no Chromium
    }
    assert (crawl.org.slug, crawl.tags, crawl.scale) == ("acme", ["weekly", "press"], 2)


@pytest.mark.django_db
def test_add_reads_binary_size_units_and_plain_seconds(nudges):
    run("add", "https://example.com/", "--size-limit", "2GiB", "--time-limit", "90")
    config = Crawl.objects.get().config
    assert (config["size_limit"], config["time_limit"]) == (2 * 2**30, 90)


@pytest.mark.django_db
def test_add_json_prints_the_crawl_summary(nudges):
    summary = json.loads(run("add", "https://example.com/", "--json"))
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["id"] == Crawl.objects.get().id
    assert (summary["status"], summary["files"], summary["attempts"]) == ("queued", [], 1)


BAD_ADDS = {
    "ftp URL": (["ftp://example.com/"], "only http:// and https://"),
    "no scheme": (["example.com"], "only http:// and https://"),
    "no host": (["http://"], "has no host"),
    "bad port": (["https://example.com:99999/"], "port"),
    "space in URL": (["https://exa mple.com/"], "white space"),
    "depth below -1": (["https://e.com/", "--depth", "-5"], "--depth -5"),
    "depth absurd": (["https://e.com/", "--depth", "100000"], "--depth"),
    "zero page limit": (["https://e.com/", "--limit", "0"], "--limit"),
    "negative page limit": (["https://e.com/", "--limit", "-3"], "--limit"),
    "page limit not a number": (["https://e.com/", "--limit", "ten"], "not a whole number"),
    "too many workers": (["https://e.com/", "--workers", "1000"], "--workers"),
    "no workers": (["https://e.com/", "--workers", "0"], "--workers"),
    "absurd scale": (["https://e.com/", "--scale", "99"], "--scale"),
    "negative extra hops": (["https://e.com/", "--extra-hops", "-1"], "--extra-hops"),
    "bad size unit": (["https://e.com/", "--size-limit", "5XB"], "is not a size"),
    "negative size": (["https://e.com/", "--size-limit=-1GB"], "is not a size"),
    "zero size": (["https://e.com/", "--size-limit", "0"], "--size-limit: must be from 1 byte to 1 PiB"),
    "absurd size": (["https://e.com/", "--size-limit", "5000PB"], "is not a size"),
    "bad duration unit": (["https://e.com/", "--time-limit", "3 weeks"], "is not a duration"),
    "negative duration": (["https://e.com/", "--time-limit=-5m"], "--time-limit: must be from 1 second"),
    "absurd duration": (["https://e.com/", "--time-limit", "5000d"], "to 10 years"),
    "size of 10^30": (["https://e.com/", "--size-limit", "1" + "0" * 30],
                      "--size-limit: must be from 1 byte to 1 PiB"),
    "duration of 10^30": (["https://e.com/", "--time-limit", "1" + "0" * 30],
                          "--time-limit: must be from 1 second to 10 years"),
    "bad include regex": (["https://e.com/", "--include", "("], "not a valid regular expression"),
    "bad exclude regex": (["https://e.com/", "--exclude", "[a-"], "not a valid regular expression"),
    "unknown scope": (["https://e.com/", "--scope", "planet"], "invalid choice"),
    "unknown org": (["https://e.com/", "--org", "nope"], "no org 'nope'"),
    "empty tag": (["https://e.com/", "--tag", " "], "--tag"),
    "no URL": ([], "required"),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), BAD_ADDS.values(), ids=BAD_ADDS.keys())
def test_add_refuses_bad_input_and_writes_nothing(nudges, args, message):
    before = row_counts()
    with pytest.raises(CommandError, match=re.escape(message)):
        run("add", *args)
    assert row_counts() == before
    assert nudges == []


@pytest.mark.django_db
@pytest.mark.parametrize("cron", ["* * * *", "61 * * * *"])
def test_a_bad_cron_expression_is_refused_with_the_whole_sentence(cron):
    with pytest.raises(CommandError) as refused:
        run("schedule", "add", cron, "https://e.com/")
    assert str(refused.value) == (f"'{cron}' is not a valid cron expression (five fields: minute hour "
                                  "day-of-month month day-of-week, e.g. '0 3 * * *')")


# --- pause, resume, stop, cancel, retry ----------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("command", "status", "printed", "after"), [
    ("pause", S.QUEUED, "paused {id}", (S.PAUSED, "")),
    ("pause", S.RUNNING, "pause requested; the runner will pause {id}", (S.RUNNING, "pause")),
    ("resume", S.PAUSED, "resumed {id}: queued", (S.QUEUED, "")),
    ("stop", S.QUEUED, "canceled {id}: it had not started, so there is nothing to keep", (S.CANCELED, "")),
    ("stop", S.RUNNING, "stop requested; the runner will stop {id} and keep its archive", (S.RUNNING, "stop")),
    ("cancel", S.QUEUED, "canceled {id}", (S.CANCELED, "")),
    ("cancel", S.RUNNING, "cancel requested; the runner will cancel {id}", (S.RUNNING, "cancel")),
    ("retry", S.FAILED, "queued {id} again (attempt 2)", (S.QUEUED, "")),
])
def test_a_transition_command_says_what_happened(make_crawl, nudges, command, status, printed, after):
    started = timezone.now() if status == S.RUNNING else None
    crawl = make_crawl(status, started_at=started)
    assert run(command, crawl.id) == printed.format(id=crawl.short_id) + "\n"
    assert state(crawl) == after
    assert nudges == [True]


@pytest.mark.django_db
def test_resume_withdraws_a_pause_not_yet_carried_out(make_crawl, nudges):
    crawl = make_crawl(S.RUNNING, started_at=timezone.now())
    run("pause", crawl.id)
    assert run("resume", crawl.id) == f"pause request withdrawn; {crawl.short_id} keeps running\n"
    assert state(crawl) == (S.RUNNING, "")


@pytest.mark.django_db
def test_a_crawl_is_found_by_any_unique_prefix_of_its_id(make_crawl, nudges):
    crawl = make_crawl()
    run("pause", crawl.id[:3].upper())
    assert state(crawl) == (S.PAUSED, "")


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["pause", "resume", "stop", "cancel", "retry"])
def test_a_transition_command_json_prints_the_summary(make_crawl, nudges, command):
    crawl = make_crawl(S.FAILED if command == "retry" else S.PAUSED if command == "resume" else S.QUEUED)
    summary = json.loads(run(command, crawl.short_id, "--json"))
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["id"] == crawl.id
    assert summary["status"] == state(crawl)[0]


def ambiguous_pair(org: Org) -> tuple[Crawl, Crawl]:
    config = CrawlConfig(seeds=["https://example.com/"]).model_dump(mode="json")
    return tuple(
        Crawl.objects.create(id=f"abc{n}" + "0" * 28, org=org, seeds=config["seeds"], config=config)
        for n in (1, 2)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("command", "status", "crawl_id", "message"), [
    ("resume", S.COMPLETE, None, "cannot resume crawl {short}: it is complete"),
    ("pause", S.PAUSED, None, "cannot pause crawl {short}: it is paused"),
    ("stop", S.FAILED, None, "cannot stop crawl {short}: it failed"),
    ("cancel", S.CANCELED, None, "cannot cancel crawl {short}: it is canceled"),
    ("retry", S.RUNNING, None, "cannot retry crawl {short}: it is running"),
    ("pause", S.QUEUED, "fffffff", "no crawl with id 'fffffff'"),
    ("pause", S.QUEUED, "xyz!", "'xyz!' is not a crawl id"),
    ("pause", S.QUEUED, "abc", "crawl id 'abc' is ambiguous"),
])
def test_a_refused_transition_exits_with_one_message_and_writes_nothing(
    make_crawl, nudges, command, status, crawl_id, message
):
    crawl = make_crawl(status)
    ambiguous_pair(crawl.org)
    before = row_counts()
    with pytest.raises(CommandError, match=re.escape(message.format(short=crawl.short_id))):
        run(command, crawl_id or crawl.id)
    assert row_counts() == before
    assert state(crawl) == (status, "")
    assert nudges == []


# --- status --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_status_lists_crawls_with_state_progress_size_reason_and_org(make_crawl):
    running = make_crawl(S.RUNNING, pages_found=40, pages_done=10, size_bytes=1_500_000)
    waiting = make_crawl(S.WAITING_ORG_LIMIT, waiting_reason="org default runs 2 of 2 crawls")
    out = run("status")
    line = next(line for line in out.splitlines() if line.startswith(running.short_id))
    assert "running" in line and "10/40" in line and "1.5 MB" in line and "default" in line
    assert "org default runs 2 of 2 crawls" in out
    assert out.index(waiting.short_id) < out.index(running.short_id)  # newest first


@pytest.mark.django_db
def test_status_always_shows_active_crawls_and_limits_the_finished_ones(make_crawl):
    old = timezone.now() - timezone.timedelta(days=30)
    active = make_crawl(S.RUNNING, created_at=old)
    finished = [make_crawl(S.COMPLETE) for _ in range(5)]
    out = run("status", "--limit", "2")
    assert active.short_id in out
    assert sum(crawl.short_id in out for crawl in finished) == 2
    assert all(crawl.short_id in run("status", "--all") for crawl in finished)


@pytest.mark.django_db
def test_status_filters_by_state(make_crawl):
    done = make_crawl(S.COMPLETE)
    failed = make_crawl(S.FAILED)
    queued = make_crawl()
    out = run("status", "--state", "failed")
    assert failed.short_id in out and done.short_id not in out and queued.short_id not in out
    finals = run("status", "--state", "final")
    assert failed.short_id in finals and done.short_id in finals and queued.short_id not in finals


class Terminal(StringIO):
    """What `archiver status` writes to at a terminal."""

    def isatty(self) -> bool:
        return True


LONG_ERROR = "the crawler quit: " + "a very long error from deep inside the crawler " * 8


@pytest.mark.parametrize(("out", "width"), [(Terminal(), 80), (StringIO(), 160)], ids=["80-columns", "pipe"])
@pytest.mark.django_db
def test_status_shows_every_column_with_a_long_reason_cut_to_the_width(make_crawl, monkeypatch, out, width):
    monkeypatch.setenv("COLUMNS", "80")  # the terminal's width; a pipe gets 160
    monkeypatch.setenv("NO_COLOR", "1")
    short = make_crawl(S.RUNNING, pages_found=40, pages_done=10)
    long = make_crawl(S.FAILED, url="https://example.com/" + "deep/" * 30, error=LONG_ERROR)
    call_command("status", stdout=out, stderr=StringIO())
    lines = out.getvalue().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines)
    at = next(n for n, line in enumerate(lines) if line.startswith(long.short_id))
    short_line = next(line for line in lines if line.startswith(short.short_id))
    assert "running" in short_line and "10/40" in short_line
    if width == 160:
        assert lines[0].split() == ["ID", "STATE", "PAGES", "SIZE", "REASON", "ORG", "AGE", "SEED"]
        long_line = lines[at]
        assert long_line.count("…") == 2  # the rest of its error and of the seed cut
    else:  # too narrow for a readable seed and reason beside the rest: they go below
        assert lines[0].split() == ["ID", "STATE", "PAGES", "SIZE", "ORG", "AGE"]
        assert lines[1].split() == ["SEED", "REASON"]
        long_line = " ".join(lines[at:at + 2])
        assert lines[at + 1].count("…") == 2  # each gets half the line
        assert "https://example.com/deep/deep/" in long_line
    assert "failed" in long_line and "the crawl" in long_line  # the start of its error
    assert "default" in long_line and "https://" in long_line


@pytest.mark.django_db
def test_status_with_no_crawls_says_so():
    assert run("status") == "no crawls\n"


@pytest.mark.django_db
def test_status_json_is_a_list_of_summaries_with_files(make_crawl):
    crawl = make_crawl(S.COMPLETE, pages_found=3, pages_done=3, size_bytes=2048)
    CrawlFile.objects.create(crawl=crawl, path=f"crawls/{crawl.id}/a.wacz", size=2048, sha256="ab" * 32)
    (summary,) = json.loads(run("status", "--json"))
    assert summary.keys() >= SUMMARY_KEYS
    (file,) = summary["files"]
    assert file.items() >= {"path": f"crawls/{crawl.id}/a.wacz", "size": 2048, "sha256": "ab" * 32}.items()
    assert (summary["status"], summary["pages_done"], summary["org"]) == ("complete", 3, "default")


@pytest.mark.django_db
def test_status_of_one_crawl_shows_config_limits_files_processes_and_log(make_crawl):
    crawl = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(
        seeds=["https://example.com/"], page_limit=100, size_limit=10**9, time_limit=3600,
    ))
    Crawl.objects.filter(pk=crawl.pk).update(status=S.RUNNING, pages_done=25, pages_found=50,
                                             size_bytes=2 * 10**8, elapsed_seconds=600)
    CrawlFile.objects.create(crawl=crawl, path="crawls/x/part.wacz", size=10**6, sha256="cd" * 32)
    Process.objects.create(crawl=crawl, instance=0, hostname="crawl-abc-0", launcher="docker",
                           status="exited", exit_code=137, exit_reason="oom")
    CrawlLog.objects.create(crawl=crawl, level="error", source="crawler-0", message="page timed out")
    out = run("status", crawl.id[:6])
    assert f"crawl {crawl.id}" in out
    assert "25 of 100" in out and "200.0 MB of 1.0 GB" in out and "10m00s of 1h00m" in out
    assert "scope_type" in out and "prefix" in out
    assert "crawls/x/part.wacz" in out
    assert "crawl-abc-0" in out and "137 oom" in out
    assert "page timed out" in out


@pytest.mark.django_db
def test_status_of_a_crawl_started_seconds_ago_shows_them_as_its_running_time(make_crawl):
    crawl = make_crawl(S.RUNNING)
    started = timezone.now() - dt.timedelta(seconds=8)
    Process.objects.create(crawl=crawl, instance=0, hostname=f"crawl-{crawl.pk}-0", launcher="local",
                           status="running", started_at=started, counted_until=started)
    # "0 s" was the bug; the upper bounds only leave a slow machine its seconds.
    shown = re.search(r"running time\s+(\d+)s\b", run("status", crawl.short_id))
    assert shown and 8 <= int(shown[1]) < 8 + HANG
    assert 8 <= json.loads(run("status", crawl.short_id, "--json"))["elapsed_seconds"] < 8 + HANG


@pytest.mark.django_db
def test_status_of_one_crawl_json_is_its_summary(make_crawl):
    crawl = make_crawl()
    summary = json.loads(run("status", crawl.short_id, "--json"))
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["id"] == crawl.id


@pytest.mark.django_db
def test_status_of_an_unknown_crawl_is_refused():
    with pytest.raises(CommandError, match="no crawl with id 'abcdef'"):
        run("status", "abcdef")


@pytest.mark.django_db
@pytest.mark.parametrize("args", [["--state", "sleeping"], ["--limit", "0"], ["--limit", "x"]])
def test_status_refuses_bad_options(args):
    with pytest.raises(CommandError):
        run("status", *args)


@pytest.mark.django_db
def test_status_takes_a_fixed_number_of_queries_however_many_crawls(make_crawl, django_assert_max_num_queries):
    for n in range(60):
        crawl = make_crawl(S.COMPLETE if n % 2 else S.RUNNING)
        CrawlFile.objects.create(crawl=crawl, path=f"crawls/{crawl.id}.wacz", size=1, sha256="0" * 64)
    # active crawls, then the others: each with their files and running instances
    with django_assert_max_num_queries(6):
        assert len(json.loads(run("status", "--json", "--all"))) == 60
    with django_assert_max_num_queries(6):
        run("status", "--all")


# --- org -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_org_set_creates_then_updates_and_none_clears_a_quota():
    assert run("org", "set", "acme", "--name", "Acme Inc", "--storage-quota", "2GB",
               "--max-concurrent-crawls", "3", "--exec-minutes", "600", "--max-pages", "1000") == "created org acme\n"
    org = Org.objects.get(slug="acme")
    assert (org.name, org.storage_quota_bytes, org.max_concurrent_crawls) == ("Acme Inc", 2 * 10**9, 3)
    assert (org.exec_minutes_quota, org.max_pages_per_crawl) == (600, 1000)
    assert run("org", "set", "acme", "--storage-quota", "none") == "updated org acme\n"
    org.refresh_from_db()
    assert (org.name, org.storage_quota_bytes, org.max_concurrent_crawls) == ("Acme Inc", None, 3)


@pytest.mark.django_db
def test_org_list_shows_usage(make_crawl):
    org = Org.objects.create(slug="acme", bytes_stored=3 * 10**9, storage_quota_bytes=10**10,
                             exec_minutes_quota=120)
    OrgUsage.objects.create(org=org, month=month_start(timezone.now()), exec_seconds=45 * 60)
    make_crawl(S.RUNNING, org="acme")
    make_crawl(S.COMPLETE, org="acme")
    line = next(line for line in run("org", "list").splitlines() if line.startswith("acme"))
    assert "3.0 GB / 10.0 GB" in line and "45 / 120" in line
    listed = {item["slug"]: item for item in json.loads(run("org", "list", "--json"))}
    assert listed["acme"] == {
        "slug": "acme", "name": "", "max_concurrent_crawls": None, "storage_quota_bytes": 10**10,
        "exec_minutes_quota": 120, "max_pages_per_crawl": None, "bytes_stored": 3 * 10**9,
        "exec_minutes_this_month": 45.0, "active_crawls": 1,
    }
    assert listed["default"]["active_crawls"] == 0


@pytest.mark.django_db
def test_org_list_shows_an_old_zero_quota_as_the_runner_enforces_it():
    Org.objects.create(slug="legacy", max_concurrent_crawls=0, max_pages_per_crawl=0, storage_quota_bytes=0)
    line = next(line for line in run("org", "list").splitlines() if line.startswith("legacy"))
    assert line.split()[-2:] == ["0", "-"] and "0 B / 0 B" in line  # as the runner reads them


@pytest.mark.django_db
def test_status_with_an_empty_id_is_refused_not_a_listing(make_crawl):
    make_crawl()
    with pytest.raises(CommandError, match="'' is not a crawl id"):
        run("status", "")


BAD_ORGS = {
    "bad slug": (["set", "a b"], "is not a slug"),
    "zero concurrency": (["set", "acme", "--max-concurrent-crawls", "0"],
                         "--max-concurrent-crawls: must be from 1 to 10000"),
    "negative minutes": (["set", "acme", "--exec-minutes", "-3"], "--exec-minutes: must be from 1"),
    "absurd pages": (["set", "acme", "--max-pages", "10000000000"], "--max-pages: must be from 1 to 100000000"),
    "bad size": (["set", "acme", "--storage-quota", "lots"], "is not a size"),
    "long name": (["set", "acme", "--name", "x" * 201], "at most 200 characters"),
    "long slug": (["set", "s" * 200], "an org slug is at most 50 characters (got 200)"),
    "no action": ([], "required"),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), BAD_ORGS.values(), ids=BAD_ORGS.keys())
def test_org_refuses_bad_input_and_writes_nothing(args, message):
    before = row_counts()
    with pytest.raises(CommandError, match=re.escape(message)):
        run("org", *args)
    assert row_counts() == before


# --- at a shell ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A migrated archiver data dir with its own SQLite database."""
    path = tmp_path_factory.mktemp("cli")
    manage(path, "migrate", "-v0", check=True)
    return path


def manage(data_dir: Path, *args, check=False, program=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    env["ARCHIVER_DATA_DIR"] = str(data_dir)
    command = program or [sys.executable, "manage.py"]
    return subprocess.run([*command, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=check)


def db_rows(data_dir: Path) -> dict[str, int]:
    with sqlite3.connect(data_dir / "archiver.sqlite3") as db:
        tables = [row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'crawls_%'")]
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables}


def test_add_at_a_shell_prints_the_id_and_nudges_a_listening_runner(data_dir):
    (data_dir / "run").mkdir(exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
        wake.bind(str(data_dir / "run" / "wake.sock"))
        wake.settimeout(10)
        try:
            result = manage(data_dir, "add", "https://example.com/", "--tag", "shell")
            assert wake.recv(16) == b"!"
        finally:
            (data_dir / "run" / "wake.sock").unlink()
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"[0-9a-f]{32}\n", result.stdout)
    assert result.stdout.strip()[:8] in manage(data_dir, "status").stdout


SHELL_REFUSALS = {
    "ftp URL": (["add", "ftp://example.com/"], 1),
    "bad regex": (["add", "https://e.com/", "--include", "("], 1),
    "bad size unit": (["add", "https://e.com/", "--size-limit", "12parsecs"], 2),
    "size of 10^30": (["add", "https://e.com/", "--size-limit", "1" + "0" * 30], 1),
    "duration of 10^30": (["add", "https://e.com/", "--time-limit", "1" + "0" * 30], 1),
    "unknown option": (["add", "https://e.com/", "--depht", "2"], 2),
    "unknown id": (["pause", "fffffff"], 1),
    "bad org quota": (["org", "set", "acme", "--storage-quota=-5GB"], 2),
    "zero org quota": (["org", "set", "acme", "--max-concurrent-crawls", "0"], 1),
    "200-character slug": (["org", "set", "s" * 200], 1),
    "huge status limit": (["status", "--limit", "99999999999999999999"], 1),
    "status limit not a number": (["status", "--limit", "ten"], 2),
    "empty crawl id": (["status", ""], 1),
    "negative deliveries limit": (["webhook", "deliveries", "--limit", "-3"], 1),
    "webhook id past 2^63": (["webhook", "deliveries", "--webhook", str(2**63)], 1),
    "delivery id past 2^64": (["webhook", "replay", str(2**64)], 1),
    "schedule id past 2^64": (["schedule", "enable", str(2**64)], 1),
    "unknown subcommand": (["webhook", "frobnicate"], 2),
    "header injection": (["add", "https://e.com/", "--user-agent", "a\r\nX-Injected: 1"], 1),
    "empty exclude": (["add", "https://e.com/", "--exclude", ""], 1),
    "seed with a password": (["add", "https://alice:hunter2@e.com/"], 1),
}


@pytest.mark.parametrize(("args", "code"), SHELL_REFUSALS.values(), ids=SHELL_REFUSALS.keys())
def test_bad_input_at_a_shell_exits_non_zero_with_one_line_and_writes_nothing(data_dir, args, code):
    before = db_rows(data_dir)
    result = manage(data_dir, *args)
    assert result.returncode == code
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr
    assert db_rows(data_dir) == before


def test_resuming_a_finished_crawl_at_a_shell_is_refused(data_dir):
    crawl_id = manage(data_dir, "add", "https://example.com/x").stdout.strip()
    assert manage(data_dir, "cancel", crawl_id[:10]).returncode == 0
    before = db_rows(data_dir)
    result = manage(data_dir, "resume", crawl_id[:10])
    assert result.returncode == 1
    assert result.stderr == f"CommandError: cannot resume crawl {crawl_id[:8]}: it is canceled\n"
    assert db_rows(data_dir) == before


def at_a_terminal(data_dir: Path, columns: int, *args, program=None) -> list[str]:
    """What a command prints at a real terminal (a pseudo-terminal) of `columns` columns."""
    import fcntl
    import pty
    import struct
    import termios

    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ARCHIVER_", "DJANGO_")) and k not in ("COLUMNS", "LINES")}
    env.update(ARCHIVER_DATA_DIR=str(data_dir), NO_COLOR="1")
    with subprocess.Popen([*(program or [sys.executable, "manage.py"]), *args], cwd=REPO, env=env, stdin=terminal,
                          stdout=terminal, stderr=subprocess.PIPE) as command:
        os.close(terminal)
        output = b""
        while chunk := read_or_end(main):
            output += chunk
        command.wait(timeout=60)
    os.close(main)
    assert command.returncode == 0, command.stderr.read()
    return output.decode().splitlines()


def read_or_end(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the command closed the terminal
        return b""


def test_status_at_an_80_column_terminal_shows_id_and_state_above_a_long_error(data_dir):
    crawl_id = manage(data_dir, "add", "https://example.com/" + "deep/" * 30, check=True).stdout.strip()
    with sqlite3.connect(data_dir / "archiver.sqlite3") as db:
        db.execute("UPDATE crawls_crawl SET status='failed', error=? WHERE id=?", (LONG_ERROR, crawl_id))
    lines = at_a_terminal(data_dir, 80, "status")
    assert lines[0].split() == ["ID", "STATE", "PAGES", "SIZE", "ORG", "AGE"]
    assert all(len(line.rstrip()) <= 80 for line in lines)
    (at,) = [n for n, line in enumerate(lines) if line.startswith(crawl_id[:8])]
    assert "failed" in lines[at] and "the crawl" in lines[at + 1] and "…" in lines[at + 1]


def test_status_at_an_80_column_terminal_shows_each_crawls_id_state_pages_and_seed(data_dir):
    seeds = {"running": "https://docs.python.org/3/library/index.html",
             "failed": "https://example.net/" + "deep/" * 30}
    refused = "connection refused: 127.0.0.1:9 (no page archived, exit 9)"  # as the runner says it
    ids = {}
    for state, seed in seeds.items():
        ids[state] = manage(data_dir, "add", seed, check=True).stdout.strip()
        with sqlite3.connect(data_dir / "archiver.sqlite3") as db:
            db.execute("UPDATE crawls_crawl SET status=?, intent=?, error=?, pages_done=529, pages_found=5292 "
                       "WHERE id=?", (state, "pause" if state == "running" else "",
                                      refused if state == "failed" else "", ids[state]))
    lines = at_a_terminal(data_dir, 80, "status", program=ARCHIVER_SCRIPT)
    assert all(len(line.rstrip()) <= 80 for line in lines)
    for state, seed in seeds.items():
        at = next(n for n, line in enumerate(lines) if line.startswith(ids[state][:8]))
        shown = " ".join(lines[at:at + 2])  # its own line, and a second one if it needs it
        assert state in lines[at] and "529/5292" in lines[at]
        assert seed[:18] in shown, shown
    failed = next(n for n, line in enumerate(lines) if line.startswith(ids["failed"][:8]))
    assert "connection refused: 127.0.0.1:9" in " ".join(lines[failed:failed + 2])


ARCHIVER_SCRIPT = [sys.executable, "-c",
                   "import sys; from archiver.cli import main; sys.argv[0] = 'archiver'; main()"]


def test_the_archiver_console_script_runs_the_same_commands(data_dir):
    result = manage(data_dir, "status", "--json", program=ARCHIVER_SCRIPT)
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list)
    refused = manage(data_dir, "add", "https://e.com/", "--size-limit", "1parsec", program=ARCHIVER_SCRIPT)
    assert (refused.returncode, refused.stderr[:20]) == (2, "archiver add: error:")


def test_archiver_version_names_archiver_its_crawler_django_and_python(tmp_path):
    import archiver_crawler
    import django

    import archiver

    result = manage(tmp_path / "nowhere", "--version", program=ARCHIVER_SCRIPT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [f"archiver {archiver.__version__}",
                         f"archiver-crawler {archiver_crawler.__version__}",
                         f"Django {django.get_version()}"]
    assert lines[3].startswith(f"Python {sys.version.split()[0]} (")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.django_db
def test_retry_failed_pages_queues_only_the_pages_that_failed(make_crawl, nudges):
    crawl = make_crawl(S.COMPLETE, pages_found=3, pages_done=2, pages_failed=1)
    Snapshot.objects.create(crawl=crawl, url="https://example.com/ok")
    Snapshot.objects.create(crawl=crawl, url="https://example.com/broken", status="failed")
    out = run("retry", crawl.short_id, "--failed-pages")
    assert out == f"queued {crawl.short_id} again for its 1 failed page(s) (attempt 2)\n"
    crawl.refresh_from_db()
    assert crawl.status == S.QUEUED
    assert crawl.config_override["seeds"] == ["https://example.com/broken"]
    assert "this session" in run("status", crawl.short_id)


@pytest.mark.django_db
def test_retry_failed_pages_of_a_crawl_without_failures_is_refused(make_crawl, nudges):
    crawl = make_crawl(S.COMPLETE)
    before = row_counts()
    with pytest.raises(CommandError, match="has no failed pages to retry"):
        run("retry", crawl.short_id, "--failed-pages")
    assert row_counts() == before


@pytest.mark.django_db
def test_retry_failed_pages_seeds_only_urls_that_pass_the_seed_rules(make_crawl, nudges):
    crawl = make_crawl(S.COMPLETE, pages_failed=3)
    for url in ("https://example.com/broken", "https://u:hunter2@example.com/", "https://example.com/" + "a" * 3000):
        Snapshot.objects.create(crawl=crawl, url=url, status="failed")
    run("retry", crawl.short_id, "--failed-pages")
    crawl.refresh_from_db()
    assert crawl.config_override["seeds"] == ["https://example.com/broken"]
    assert crawl.launch_config().seeds == ["https://example.com/broken"]


@pytest.mark.django_db
def test_status_of_one_crawl_at_80_columns_shows_every_column_of_its_files_and_processes(
        make_crawl, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    crawl = make_crawl(S.RUNNING)
    CrawlFile.objects.create(crawl=crawl, path=f"crawls/{crawl.id}/" + "long-name-" * 12 + ".wacz",
                             size=10**6, sha256="cd" * 32)
    for i in range(2):
        Process.objects.create(crawl=crawl, instance=i, hostname=f"crawl-{crawl.id}-{i}", launcher="docker",
                               status="exited", exit_code=137, exit_reason="oom")
    out = Terminal()
    call_command("status", crawl.short_id, stdout=out, stderr=StringIO())
    lines = out.getvalue().splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), max(lines, key=len)
    headers = [line.split() for line in lines]
    assert ["HOST", "LAUNCHER", "STATUS", "EXIT", "PAGES", "SIZE", "STARTED", "ENDED"] in headers
    assert ["PATH", "SIZE", "SHA256"] in headers
    assert sum("docker" in line and "exited" in line for line in lines) == 2
    assert any("cdcdcdcd" in line for line in lines)


@pytest.mark.django_db
def test_status_of_a_crawl_whose_stored_config_is_damaged_shows_the_rest(make_crawl):
    crawl = make_crawl(S.FAILED, error="it went wrong")
    Crawl.objects.filter(pk=crawl.pk).update(config=["not", "a", "config"])
    out = run("status", crawl.short_id)
    assert f"crawl {crawl.id}" in out and "it went wrong" in out
    assert "config: cannot be shown: its stored data is damaged" in out
    assert crawl.short_id in run("status")  # the listing too


def test_archiver_alone_lists_its_own_commands_grouped_and_djangos_behind_help_all(tmp_path):
    listing = manage(tmp_path / "nowhere", program=ARCHIVER_SCRIPT)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    groups = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert groups[:3] == ["crawls:", "archives:", "operations:"]
    commands = [line.split()[0] for line in lines if line.startswith("  ")]
    assert commands[:3] == ["add", "status", "pause"]
    assert {"files", "pages", "run", "doctor", "migrate"} <= set(commands)
    assert not {"flush", "startproject", "shell", "dumpdata"} & set(commands)
    every = manage(tmp_path / "nowhere", "help", "--all", program=ARCHIVER_SCRIPT)
    assert every.returncode == 0, every.stderr
    assert "flush" in every.stdout and "startproject" in every.stdout and "add" in every.stdout
    one = manage(tmp_path / "nowhere", "help", "add", program=ARCHIVER_SCRIPT)
    assert one.returncode == 0 and "--depth" in one.stdout


def test_a_command_logs_only_warnings_unless_asked_for_more(data_dir):
    # `archiver delete` printed "… INFO [crawls.actions] deleted crawl …" on stderr (issue 41).
    crawl_ids = [manage(data_dir, "add", "https://example.com/", check=True).stdout.strip() for _ in range(2)]
    for crawl_id in crawl_ids:
        manage(data_dir, "cancel", crawl_id, check=True)
    quiet = manage(data_dir, "delete", crawl_ids[0])
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert f"crawl {crawl_ids[0][:8]}" in quiet.stdout
    told = manage(data_dir, "delete", crawl_ids[1], "-v", "2")
    assert told.returncode == 0 and "INFO" in told.stderr and "deleted crawl" in told.stderr


def test_archiver_alone_in_a_pipe_shows_each_commands_whole_description(tmp_path):
    listing = manage(tmp_path / "nowhere", program=ARCHIVER_SCRIPT)
    assert listing.returncode == 0, listing.stderr
    assert "…" not in listing.stdout
    retry = next(line for line in listing.stdout.splitlines() if line.split()[:1] == ["retry"])
    assert retry.endswith("crawl only the pages a finished crawl failed on, into the same archive"), retry
