"""The lifecycle rules as the runner carries them out, one tick at a time.

In-memory launcher and store (tests/fakes.py), time pinned and stepped: schedules, the pause limit,
stop/cancel of a paused crawl, a full disk, execution time across a month, live exclusions,
scale, stalls, retention, and what is left in an instance's folder after its WACZ is kept.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import zipfile

import pytest

from crawls.config import CrawlConfig
from crawls.models import (
    Crawl,
    CrawlFile,
    CrawlStatus,
    ExitReason,
    Org,
    OrgUsage,
    ProcessStatus,
)
from crawls.schedules import create_schedule
from runner.launchers import hostname
from tests.runner.step_helpers import T0, end_instance, keys, later, report

S = CrawlStatus
pytestmark = pytest.mark.django_db


@pytest.fixture
def store(memory_store):
    return memory_store
DISK_FULL = "waiting: disk 93 % full (limit 90 %)"


# --- schedules -------------------------------------------------------------------------------


def test_a_schedule_fires_once_per_slot_and_never_while_its_crawl_runs(make_runner, fake, store, org):
    schedule = create_schedule(org, "* * * * *", CrawlConfig(seeds=["http://127.0.0.1:9/"]), now=T0)
    runner = make_runner(fake)

    runner.tick(later(30))
    assert Crawl.objects.count() == 0  # the first slot is 12:01

    for second in (60, 60.5, 61, 75):
        runner.tick(later(second))
    (first,) = Crawl.objects.all()
    assert first.schedule_id == schedule.pk and first.status == S.RUNNING

    runner.tick(later(120))  # the 12:02 slot, while the first crawl still runs
    assert Crawl.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.retry_at == later(180) and schedule.last_crawl_id == first.pk

    end_instance(fake, store, first, 0, "done")
    runner.tick(later(121))
    assert Crawl.objects.get(pk=first.pk).status == S.COMPLETE
    for second in (180, 181, 182, 200):
        runner.tick(later(second))
    assert Crawl.objects.count() == 2


# --- paused crawls ---------------------------------------------------------------------------


def paused_crawl(make_crawl, runner, fake, store, wacz: bytes | None = b"part one") -> Crawl:
    crawl = make_crawl()
    runner.tick(T0)
    report(store, crawl, done=1, found=3)
    crawl.pause(later(1))
    runner.tick(later(1))
    end_instance(fake, store, crawl, 0, "interrupted", wacz=wacz)
    runner.tick(later(2))
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED
    return crawl


def test_a_crawl_paused_longer_than_the_pause_limit_ends_and_keeps_its_archive(
        make_runner, make_crawl, fake, store, settings):
    runner = make_runner(fake)
    crawl = paused_crawl(make_crawl, runner, fake, store)
    db = crawl.redis_db

    runner.tick(later(2 + settings.pause_limit - 1))
    assert Crawl.objects.get(pk=crawl.pk).status == S.PAUSED
    runner.tick(later(2 + settings.pause_limit))

    crawl.refresh_from_db()
    assert crawl.status == S.STOPPED_PAUSE_LIMIT and crawl.stop_reason == "pause_limit"
    assert crawl.files.count() == 1 and crawl.redis_db is None
    assert store.client(db).dbsize() == 0


@pytest.mark.parametrize(("ask", "ends", "files"), [("stop", S.STOPPED_BY_USER, 1), ("cancel", S.CANCELED, 0)])
def test_stop_or_cancel_of_a_paused_crawl_is_carried_out_at_once(
        make_runner, make_crawl, fake, store, ask, ends, files):
    runner = make_runner(fake)
    crawl = paused_crawl(make_crawl, runner, fake, store)

    getattr(crawl, ask)(later(10))
    runner.tick(later(10))

    crawl.refresh_from_db()
    assert crawl.status == ends and crawl.files.count() == files
    assert fake.launches == 1  # never relaunched to be stopped


# --- a full disk -----------------------------------------------------------------------------


class Disk:
    """What the runner's disk check answers: full or not, as the test says."""

    def __init__(self):
        self.reason = None

    def __call__(self):
        return self.reason


def test_a_full_disk_pauses_running_crawls_and_space_returning_resumes_only_them(
        make_runner, make_crawl, fake, store):
    disk = Disk()
    runner = make_runner(fake, disk_check=disk)
    running, by_user = make_crawl(now=T0 - dt.timedelta(minutes=2)), make_crawl(now=T0 - dt.timedelta(minutes=1))
    runner.tick(T0)
    by_user.pause(later(1))
    runner.tick(later(1))
    end_instance(fake, store, by_user, 0, "interrupted")

    disk.reason = DISK_FULL
    runner.tick(later(2))
    crawl = Crawl.objects.get(pk=running.pk)
    assert crawl.intent == "pause" and crawl.waiting_reason == "paused: disk 93 % full (limit 90 %)"
    assert keys(store, crawl).get(f"{crawl.pk}:paused") == "1"
    end_instance(fake, store, crawl, 0, "interrupted")
    for second in (3, 4, 30):
        runner.tick(later(second))
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED and crawl.waiting_reason == "paused: disk 93 % full (limit 90 %)"
    assert Crawl.objects.get(pk=by_user.pk).status == S.PAUSED

    disk.reason = None
    runner.tick(later(31))
    runner.tick(later(32))
    assert Crawl.objects.get(pk=running.pk).status == S.RUNNING
    assert keys(store, crawl).get(f"{crawl.pk}:paused") is None
    by_user.refresh_from_db()
    assert by_user.status == S.PAUSED and by_user.waiting_reason == ""


def test_a_person_pausing_a_crawl_paused_for_the_disk_keeps_it_paused(make_runner, make_crawl, fake, store):
    disk = Disk()
    runner = make_runner(fake, disk_check=disk)
    crawl = make_crawl()
    runner.tick(T0)
    disk.reason = DISK_FULL
    runner.tick(later(1))
    end_instance(fake, store, crawl, 0, "interrupted")
    runner.tick(later(2))
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED and crawl.waiting_reason.startswith("paused: disk")

    crawl.pause(later(3))
    disk.reason = None
    runner.tick(later(4))
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED and crawl.waiting_reason == ""


def test_new_crawls_wait_while_the_disk_is_full(make_runner, make_crawl, fake):
    from crawls.admission import HostUsage

    usage = HostUsage(disk_used=93, disk_free=7)
    runner = make_runner(fake, host_check=None, host_usage=lambda: usage)
    crawl = make_crawl()

    runner.tick(T0)

    crawl.refresh_from_db()
    assert crawl.status == S.WAITING_CAPACITY and crawl.waiting_reason == DISK_FULL
    assert fake.launches == 0
    usage = HostUsage(disk_used=50, disk_free=50)
    runner.tick(later(10))
    assert Crawl.objects.get(pk=crawl.pk).status == S.RUNNING


def test_the_test_hook_reads_the_disk_use_from_a_file(settings, tmp_path):
    from runner.service import TEST_DISK_FILE, simulated_disk

    assert simulated_disk(settings, environ={}) is None
    path = tmp_path / "disk"
    usage = simulated_disk(settings, environ={TEST_DISK_FILE: str(path)})
    real = usage()  # no file: the real disk
    assert real.disk_used + real.disk_free > 100_000
    path.write_text("93\n")
    assert round(usage().disk_used_percent) == 93


# --- execution time, exclusions, scale, stalls ----------------------------------------------


def test_execution_time_across_midnight_utc_goes_to_both_months(make_runner, make_crawl, fake, store):
    start = dt.datetime(2030, 1, 31, 23, 50, tzinfo=dt.UTC)
    crawl = make_crawl(now=start)
    runner = make_runner(fake)
    runner.tick(start)
    runner.tick(start + dt.timedelta(minutes=15))  # 00:05 on 1 February

    usage = dict(OrgUsage.objects.filter(org=crawl.org).values_list("month", "exec_seconds"))
    assert usage == {dt.date(2030, 1, 1): 600.0, dt.date(2030, 2, 1): 300.0}
    assert Crawl.objects.get(pk=crawl.pk).exec_seconds == 900.0


def test_a_live_exclusion_is_pushed_once_to_every_running_instance(make_runner, make_crawl, fake, store):
    crawl = make_crawl(scale=2)
    runner = make_runner(fake)
    runner.tick(T0)
    crawl.change_exclusion(r"/private/", later(1))
    runner.tick(later(1))
    runner.tick(later(2))

    r = keys(store, crawl)
    for i in (0, 1):
        assert r.lrange(f"{hostname(crawl.pk, i)}:msg", 0, -1) == [
            json.dumps({"type": "addExclusion", "regex": "/private/"})]
    assert crawl.messages.get().sent_at == later(1)
    assert Crawl.objects.get(pk=crawl.pk).config["exclude"] == ["/private/"]


def test_scaling_up_joins_the_same_queue_and_down_again_forgets_the_instance(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    for round_, at in enumerate((10, 20)):
        crawl.set_scale(2, later(at))
        runner.tick(later(at))
        specs = [fake.instances[ref].spec for ref in fake.running(crawl.pk)]
        assert sorted(s.instance for s in specs) == [0, 1] and {s.db for s in specs} == {crawl.redis_db or 1}
        report(store, crawl, instance=1, status="running")

        crawl.set_scale(1, later(at + 1))
        runner.tick(later(at + 1))
        r = keys(store, crawl)
        assert r.hget(f"{crawl.pk}:stopone", hostname(crawl.pk, 1)) == "1", f"round {round_}"
        end_instance(fake, store, crawl, 0, "done", instance=1)
        runner.tick(later(at + 2))
        assert r.hget(f"{crawl.pk}:stopone", hostname(crawl.pk, 1)) is None
        assert r.hget(f"{crawl.pk}:status", hostname(crawl.pk, 1)) is None
        assert len(fake.running(crawl.pk)) == 1
    assert Crawl.objects.get(pk=crawl.pk).status == S.RUNNING


def test_a_stalled_crawl_is_restarted_and_fails_at_the_third_stall(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    for stall in (1, 2):
        runner.tick(later(stall * 15 * 60))
        assert Crawl.objects.get(pk=crawl.pk).stalls == stall
        runner.tick(later(stall * 15 * 60 + 1))
        assert len(fake.running(crawl.pk)) == 1  # relaunched at once
    runner.tick(later(45 * 60 + 2))

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and crawl.stop_reason == "stalled"
    assert "no page was done for 15 minutes, 3 times" in crawl.error
    restarted = crawl.processes.filter(exit_reason=ExitReason.REMOVED).count()
    assert restarted == 3 and not crawl.processes.filter(status=ProcessStatus.LOST).exists()


def test_a_resumed_crawl_starts_its_stall_clock_again(make_runner, make_crawl, fake, store):
    runner = make_runner(fake)
    crawl = paused_crawl(make_crawl, runner, fake, store)
    crawl.resume(later(3600))
    runner.tick(later(3600))
    runner.tick(later(3601))

    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING and crawl.stalls == 0


# --- retention -------------------------------------------------------------------------------


def test_the_runner_deletes_expired_crawls_at_most_once_a_minute(make_runner, make_crawl, fake, settings, org):
    settings = settings.model_copy(update={"retention_days": 30})
    runner = make_runner(fake, settings=settings)
    old = T0 - dt.timedelta(days=31)

    def finished(at: dt.datetime) -> Crawl:
        crawl = make_crawl(now=at)
        path = f"archives/{crawl.pk}/{crawl.pk}.wacz"
        (settings.data_dir / path).parent.mkdir(parents=True)
        (settings.data_dir / path).write_bytes(b"x" * 10)
        CrawlFile.objects.create(crawl=crawl, path=path, size=10, sha256="0" * 64)
        Crawl.objects.filter(pk=crawl.pk).update(status=S.COMPLETE, finished_at=at, retry_at=None)
        return crawl

    expired, recent = finished(old), finished(T0 - dt.timedelta(days=29))
    paused = make_crawl(now=old)
    Crawl.objects.filter(pk=paused.pk).update(status=S.PAUSED, paused_at=old, retry_at=T0 + dt.timedelta(days=1))
    Org.objects.filter(pk=org.pk).update(bytes_stored=20)

    runner.tick(T0)
    assert set(Crawl.objects.values_list("pk", flat=True)) == {recent.pk, paused.pk}
    assert not (settings.data_dir / "archives" / expired.pk).exists()
    assert Org.objects.get(pk=org.pk).bytes_stored == 10

    runner.tick(later(1))  # nothing more: the next look is a minute later
    late = finished(old)
    runner.tick(later(30))
    assert Crawl.objects.filter(pk=late.pk).exists()
    runner.tick(later(62))
    assert not Crawl.objects.filter(pk=late.pk).exists()
    assert Crawl.objects.filter(pk=recent.pk).exists()


# --- what a kept WACZ takes out of the instance folder ----------------------------------------


def wacz_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("datapackage.json", "{}")
    return buffer.getvalue()


def test_the_warcs_a_kept_wacz_holds_leave_the_instance_folder_and_its_size(
        make_runner, make_crawl, fake, store, settings):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    folder = settings.crawls_dir / crawl.pk / "0" / "collections" / crawl.pk
    files = {
        "archive/rec-1.warc.gz": b"a" * 100,  # packed: goes
        "archive/rec-2.warc.gz": b"b" * 50,  # grew after packing (30 bytes packed): stays
        "archive/rec-3.warc.gz": b"c" * 70,  # not packed: stays
        "warc-cdxj/rec-1.warc.gz.cdxj": b"index", "warc-cdx/rec-1.warc.gz.cdx": b"index",
        "warc-cdxj/rec-3.warc.gz.cdxj": b"index",
        "pages/pages.jsonl": b'{"format": "json-pages-1.0"}\n',
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    report(store, crawl, done=3, found=3, size=220)
    packed = wacz_of({"archive/rec-1.warc.gz": files["archive/rec-1.warc.gz"],
                      "archive/rec-2.warc.gz": b"b" * 30, "pages/pages.jsonl": files["pages/pages.jsonl"],
                      "archive/../escape": b"", "indexes/index.cdxj": b""})
    runner.tick(later(1))
    end_instance(fake, store, crawl, 0, "interrupted", wacz=packed)  # e.g. a crash-relaunch
    runner.tick(later(2))

    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert left == ["archive/rec-2.warc.gz", "archive/rec-3.warc.gz", "warc-cdxj/rec-3.warc.gz.cdxj"]
    assert keys(store, crawl).hget(f"{crawl.pk}:size", hostname(crawl.pk, 0)) == "120"
    (kept,) = crawl.files.all()
    assert (settings.data_dir / kept.path).read_bytes() == packed
    runner.tick(later(3))
    crawl.refresh_from_db()
    assert crawl.size_bytes == kept.size + 120

