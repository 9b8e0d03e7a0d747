"""Retention deletes finished, old enough crawls: files inside the data dir, then rows."""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path

import pytest

from archiver import conf
from crawls.models import Crawl, CrawlFile, CrawlStatus, Org, Schedule
from crawls.retention import purge_expired
from tests.lifecycle.claiming import NOW

S = CrawlStatus
OLD = NOW - dt.timedelta(days=31)


@pytest.fixture
def settings_30_days(tmp_path) -> conf.Settings:
    return conf.Settings(data_dir=tmp_path / "data", retention_days=30)


@pytest.fixture
def finished(make_crawl, settings_30_days):
    """A finished crawl with one archive file of `size` bytes under the data dir."""

    def make(status=S.COMPLETE, finished_at=OLD, size=100, **fields) -> Crawl:
        crawl = make_crawl(status, finished_at=finished_at, retry_at=None, **fields)
        add_file(settings_30_days.data_dir, crawl, f"archives/{crawl.id}.wacz", size)
        return crawl

    return make


def add_file(data_dir: Path, crawl: Crawl, relative: str, size: int) -> Path:
    path = data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    CrawlFile.objects.create(crawl=crawl, path=relative, size=size, sha256="0" * 64)
    Org.objects.filter(pk=crawl.org_id).update(bytes_stored=Org.objects.get(pk=crawl.org_id).bytes_stored + size)
    return path


def test_retention_is_off_when_no_days_are_set(finished, tmp_path):
    crawl = finished()
    assert not purge_expired(NOW, settings=conf.Settings(data_dir=tmp_path / "data"))
    assert Crawl.objects.filter(pk=crawl.pk).exists()


def test_an_old_finished_crawl_is_deleted_with_its_files_and_bytes(finished, settings_30_days, org):
    crawl = finished(size=300)
    keep = finished(finished_at=NOW - dt.timedelta(days=1), size=50)
    wacz = settings_30_days.data_dir / f"archives/{crawl.id}.wacz"
    assert purge_expired(NOW, settings=settings_30_days)
    assert not wacz.exists() and not Crawl.objects.filter(pk=crawl.pk).exists()
    assert not CrawlFile.objects.filter(crawl_id=crawl.pk).exists()
    assert Crawl.objects.filter(pk=keep.pk).exists()
    org.refresh_from_db()
    assert org.bytes_stored == 50


@pytest.mark.parametrize(("age", "deleted"), [
    (dt.timedelta(days=30), False), (dt.timedelta(days=30, seconds=1), True),
])
def test_a_crawl_is_kept_for_exactly_the_retention_days(finished, settings_30_days, age, deleted):
    crawl = finished(finished_at=NOW - age)
    purge_expired(NOW, settings=settings_30_days)
    assert Crawl.objects.filter(pk=crawl.pk).exists() is not deleted


@pytest.mark.parametrize("status", [*S.NOT_STARTED, *S.RUNNING_STATES, S.PAUSED])
def test_an_active_crawl_is_never_deleted_however_old(make_crawl, settings_30_days, status):
    crawl = make_crawl(status, finished_at=OLD, created_at=OLD - dt.timedelta(days=300))
    assert not purge_expired(NOW, settings=settings_30_days)
    assert Crawl.objects.filter(pk=crawl.pk).exists()


@pytest.mark.parametrize("status", S.FINAL)
def test_every_final_state_expires(finished, settings_30_days, status):
    crawl = finished(status)
    purge_expired(NOW, settings=settings_30_days)
    assert not Crawl.objects.filter(pk=crawl.pk).exists()


def test_the_crawls_working_folder_goes_too(finished, settings_30_days):
    crawl = finished()
    folder = settings_30_days.crawls_dir / crawl.id / "collections" / "c"
    folder.mkdir(parents=True)
    (folder / "data.warc.gz").write_bytes(b"warc")
    purge_expired(NOW, settings=settings_30_days)
    assert not (settings_30_days.crawls_dir / crawl.id).exists()


def test_a_file_path_outside_the_data_dir_is_left_alone_and_logged(finished, settings_30_days, tmp_path, caplog):
    crawl = finished()
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    CrawlFile.objects.create(crawl=crawl, path="../precious.txt", size=7, sha256="0" * 64)
    CrawlFile.objects.create(crawl=crawl, path=str(outside), size=7, sha256="1" * 64)
    with caplog.at_level(logging.WARNING, logger="crawls.retention"):
        purge_expired(NOW, settings=settings_30_days)
    assert outside.read_text() == "keep me"
    assert "outside the data dir" in caplog.text
    assert not Crawl.objects.filter(pk=crawl.pk).exists()


def test_a_symlink_pointing_outside_is_never_followed(finished, settings_30_days, tmp_path):
    crawl = finished()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.wacz").write_text("keep me")
    link = settings_30_days.data_dir / "archives" / "link.wacz"
    os.symlink(outside / "secret.wacz", link)
    CrawlFile.objects.create(crawl=crawl, path="archives/link.wacz", size=7, sha256="0" * 64)
    linked_dir = settings_30_days.data_dir / "archives" / "linked"
    os.symlink(outside, linked_dir)
    CrawlFile.objects.create(crawl=crawl, path="archives/linked/secret.wacz", size=7, sha256="1" * 64)
    purge_expired(NOW, settings=settings_30_days)
    assert (outside / "secret.wacz").read_text() == "keep me"
    assert link.is_symlink()  # left alone, not even the link is removed


def test_a_working_folder_that_is_a_symlink_out_is_left_alone(finished, settings_30_days, tmp_path):
    crawl = finished()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep").write_text("keep me")
    settings_30_days.crawls_dir.mkdir(parents=True)
    os.symlink(outside, settings_30_days.crawls_dir / crawl.id)
    purge_expired(NOW, settings=settings_30_days)
    assert (outside / "keep").read_text() == "keep me"


def test_links_inside_a_working_folder_are_removed_not_followed(finished, settings_30_days, tmp_path):
    crawl = finished()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep").write_text("keep me")
    folder = settings_30_days.crawls_dir / crawl.id
    folder.mkdir(parents=True)
    os.symlink(outside, folder / "link")
    purge_expired(NOW, settings=settings_30_days)
    assert not folder.exists() and (outside / "keep").read_text() == "keep me"


def test_a_file_already_gone_does_not_stop_the_purge(finished, settings_30_days):
    crawl = finished()
    (settings_30_days.data_dir / f"archives/{crawl.id}.wacz").unlink()
    purge_expired(NOW, settings=settings_30_days)
    assert not Crawl.objects.filter(pk=crawl.pk).exists()


def test_a_file_that_cannot_be_deleted_keeps_its_crawl_for_later(finished, settings_30_days, caplog):
    crawl = finished()
    (settings_30_days.data_dir / "archives" / "a-folder").mkdir()
    CrawlFile.objects.create(crawl=crawl, path="archives/a-folder", size=1, sha256="0" * 64)
    other = finished()
    with caplog.at_level(logging.ERROR, logger="crawls.retention"):
        purge_expired(NOW, settings=settings_30_days)
    assert Crawl.objects.filter(pk=crawl.pk).exists()
    assert not Crawl.objects.filter(pk=other.pk).exists()
    assert "could not delete the files of crawl" in caplog.text


def test_crawls_are_purged_in_batches_oldest_first(finished, settings_30_days):
    crawls = [finished(finished_at=OLD - dt.timedelta(days=i)) for i in range(5)]
    assert purge_expired(NOW, batch=2, settings=settings_30_days)
    assert set(Crawl.objects.values_list("pk", flat=True)) == {c.pk for c in crawls[:3]}
    assert purge_expired(NOW, batch=2, settings=settings_30_days)
    assert purge_expired(NOW, batch=2, settings=settings_30_days)
    assert not purge_expired(NOW, batch=2, settings=settings_30_days)
    assert not Crawl.objects.exists()


def test_a_schedule_outlives_its_deleted_crawls(finished, settings_30_days, org):
    crawl = finished()
    schedule = Schedule.objects.create(org=org, cron="0 3 * * *", config=crawl.config, last_crawl=crawl)
    Crawl.objects.filter(pk=crawl.pk).update(schedule=schedule)
    purge_expired(NOW, settings=settings_30_days)
    schedule.refresh_from_db()
    assert schedule.last_crawl is None
