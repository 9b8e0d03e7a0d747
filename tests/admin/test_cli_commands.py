"""The commands issue 11 adds to the CLI: pages, files, delete, logs, schedule remove,
org delete, webhook enable/disable, and status showing both reason and error sentences."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from crawls.config import CrawlConfig
from crawls.models import (
    Crawl,
    CrawlFile,
    CrawlLog,
    CrawlStatus,
    Org,
    Schedule,
    Snapshot,
    SnapshotStatus,
    Webhook,
)

S = CrawlStatus
pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def org() -> Org:
    return Org.objects.create(slug="acme")


@pytest.fixture
def make_crawl(org):
    def make(status=S.COMPLETE, **fields) -> Crawl:
        crawl = Crawl.create(org, CrawlConfig(seeds=["https://example.com/"]))
        Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
        crawl.refresh_from_db()
        return crawl

    return make


def test_pages_lists_every_page_or_only_the_failed_ones_with_their_errors(make_crawl):
    crawl = make_crawl()
    Snapshot.objects.create(crawl=crawl, url="https://example.com/", http_status=200)
    Snapshot.objects.create(crawl=crawl, url="https://example.com/bad", status=SnapshotStatus.FAILED,
                            error="net::ERR_TIMED_OUT")
    everything = run("pages", crawl.id[:6])
    assert "https://example.com/bad" in everything and "net::ERR_TIMED_OUT" in everything
    failed = json.loads(run("pages", crawl.id, "--failed", "--json"))
    assert [(p["url"], p["error"]) for p in failed] == [("https://example.com/bad", "net::ERR_TIMED_OUT")]


def test_files_lists_paths_sizes_and_checksums(make_crawl, conf_data_dir):
    crawl = make_crawl()
    CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.id}/a.wacz", size=12, sha256="ab" * 32)
    (row,) = json.loads(run("files", crawl.id, "--json"))
    assert row == {"path": f"archives/{crawl.id}/a.wacz", "size": 12, "sha256": "ab" * 32,
                   "full_path": str(conf_data_dir / f"archives/{crawl.id}/a.wacz")}
    assert "ab" * 32 in run("files", crawl.id)


def test_delete_removes_a_finished_crawl_with_its_files(make_crawl, conf_data_dir):
    crawl = make_crawl(finished_at=timezone.now())
    relative = f"archives/{crawl.id}/a.wacz"
    (conf_data_dir / relative).parent.mkdir(parents=True)
    (conf_data_dir / relative).write_bytes(b"wacz")
    CrawlFile.objects.create(crawl=crawl, path=relative, size=4, sha256=hashlib.sha256(b"wacz").hexdigest())
    assert run("delete", crawl.id) == f"deleted crawl {crawl.short_id} and 1 file(s)\n"
    assert not (conf_data_dir / relative).exists()
    assert not Crawl.objects.exists()


def test_delete_refuses_an_active_crawl(make_crawl, conf_data_dir):
    crawl = make_crawl(S.RUNNING)
    with pytest.raises(CommandError, match="it is running"):
        run("delete", crawl.id)
    assert Crawl.objects.filter(pk=crawl.pk).exists()


def test_logs_prints_the_last_lines_oldest_first(make_crawl):
    crawl = make_crawl()
    for n in range(5):
        CrawlLog.objects.create(crawl=crawl, source="crawler-0", message=f"line {n}")
    out = run("logs", crawl.id, "--lines", "3")
    assert [line.split(": ", 1)[1] for line in out.splitlines()] == ["line 2", "line 3", "line 4"]


def test_logs_follow_stops_when_the_crawl_has_ended(make_crawl):
    crawl = make_crawl(S.COMPLETE)
    CrawlLog.objects.create(crawl=crawl, message="done")
    assert "done" in run("logs", crawl.id, "--follow")


def test_schedule_remove_keeps_the_crawls_it_queued(org, make_crawl):
    schedule = Schedule.objects.create(org=org, cron="0 3 * * *", config={"seeds": ["https://example.com/"]})
    crawl = make_crawl(schedule=schedule)
    assert run("schedule", "remove", str(schedule.pk)) == f"removed schedule {schedule.pk}\n"
    assert not Schedule.objects.exists()
    crawl.refresh_from_db()
    assert crawl.schedule is None
    with pytest.raises(CommandError, match="no schedule"):
        run("schedule", "remove", str(schedule.pk))


def test_org_delete_is_refused_while_it_has_crawls(org, make_crawl):
    crawl = make_crawl()
    with pytest.raises(CommandError, match="still has 1 crawl"):
        run("org", "delete", "acme")
    crawl.delete()
    assert run("org", "delete", "acme") == "deleted org acme\n"
    assert not Org.objects.filter(slug="acme").exists()
    with pytest.raises(CommandError, match="no org"):
        run("org", "delete", "acme")


def test_webhooks_are_disabled_and_enabled(org):
    hook = Webhook.objects.create(url="https://hooks.example/", secret="s" * 20)
    assert run("webhook", "disable", str(hook.pk)) == f"disabled webhook {hook.pk}\n"
    hook.refresh_from_db()
    assert not hook.enabled
    run("webhook", "enable", str(hook.pk))
    hook.refresh_from_db()
    assert hook.enabled
    with pytest.raises(CommandError, match="no webhook"):
        run("webhook", "enable", "999")


def test_status_shows_the_reason_sentence_and_the_error(make_crawl):
    crawl = make_crawl(S.FAILED, stop_reason="stalled", error="crawler exited 1\ntraceback...")
    out = run("status", crawl.id)
    assert "no page was done for too long (stalled)" in out
    assert "crawler exited 1" in out
    table = run("status")
    assert "stalled" in table and "crawler exited 1" in table


def test_status_says_why_a_skipped_crawl_never_started(make_crawl):
    crawl = make_crawl(S.SKIPPED_QUOTA_REACHED, stop_reason="storage_quota",
                       finished_at=timezone.now() - dt.timedelta(minutes=1))
    assert "never started: its org's storage quota was reached" in run("status", crawl.id)
