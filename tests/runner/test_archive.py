"""runner/archive.py on real files: a session's WACZ kept once with its exact bytes, what it
holds forgotten, leftovers of a killed crawler kept, unrecorded archives adopted, cancel."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import shutil
import stat
import tempfile
import zipfile

import pytest
from archiver_crawler.wacz import build_wacz
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from archiver.conf import from_environ
from crawls.models import CrawlFile, Org
from runner import archive
from tests.runner.archive_helpers import (
    collection,
    make_process,
    package,
    tree_digest,
    warc_bytes,
    write_session,
)

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
pytestmark = pytest.mark.django_db


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def org_bytes(crawl) -> int:
    return Org.objects.get(pk=crawl.org_id).bytes_stored


@pytest.fixture
def crawl(make_crawl):
    return make_crawl()


@pytest.fixture
def session(data_dir, crawl):
    """Instance 0 packaged one WACZ of two WARCs; returns (collection, its bytes)."""
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": warc_bytes("http://a/1", "http://a/2"),
                         "b.warc.gz": warc_bytes("http://b/1")}, pages=["http://a/1"])
    return coll, package(coll, crawl.pk).read_bytes()


def test_a_session_wacz_is_moved_into_archives_and_recorded_with_its_exact_bytes(data_dir, crawl, session):
    coll, wacz = session
    process = make_process(crawl)

    kept = archive.collect_wacz(data_dir, crawl, process, T0)

    path = f"archives/{crawl.pk}/{crawl.pk}-0-{process.pk}.wacz"
    assert [row.path for row in kept.files] == [path] and kept.warnings == []
    assert (data_dir / path).read_bytes() == wacz
    assert not (coll / f"{crawl.pk}.wacz").exists()
    row = CrawlFile.objects.get(crawl=crawl)
    assert (row.size, row.sha256, row.created_at) == (len(wacz), sha256(wacz), T0)
    assert kept.added_bytes == len(wacz) == org_bytes(crawl)
    assert stat.S_IMODE((data_dir / "archives").stat().st_mode) == 0o700


def test_collecting_again_keeps_the_same_file_and_counts_its_bytes_once(data_dir, crawl, session):
    process = make_process(crawl)
    first = archive.collect_wacz(data_dir, crawl, process, T0)

    again = archive.collect_wacz(data_dir, crawl, process, T0)

    assert [row.pk for row in again.files] == [row.pk for row in first.files]
    assert again.added_bytes == 0
    assert CrawlFile.objects.count() == 1 and org_bytes(crawl) == len(session[1])


def test_a_wacz_moved_before_a_crash_is_recorded_once_by_the_next_look(data_dir, crawl, session):
    coll, wacz = session
    process = make_process(crawl)
    name = f"{crawl.pk}-0-{process.pk}.wacz"
    (data_dir / "archives" / crawl.pk).mkdir(parents=True)
    os.rename(coll / f"{crawl.pk}.wacz", data_dir / "archives" / crawl.pk / name)  # moved, then killed

    kept = archive.collect_wacz(data_dir, crawl, process, T0)
    archive.collect_wacz(data_dir, crawl, process, T0)

    assert [row.path for row in kept.files] == [f"archives/{crawl.pk}/{name}"]
    assert list(CrawlFile.objects.values_list("size", "sha256")) == [(len(wacz), sha256(wacz))]
    assert org_bytes(crawl) == len(wacz)


def test_an_instance_without_a_wacz_keeps_nothing_and_says_nothing(data_dir, crawl):
    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)

    assert (kept.files, kept.warnings, CrawlFile.objects.count()) == ([], [], 0)


def test_forgetting_deletes_what_the_wacz_holds_whole_and_keeps_what_it_does_not(data_dir, crawl, session):
    coll, _ = session
    with open(coll / "archive" / "b.warc.gz", "ab") as grown:  # appended after packaging
        grown.write(warc_bytes("http://b/2"))
    (coll / "archive" / "c.warc.gz").write_bytes(later := warc_bytes("http://c/1"))
    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0).files[0]

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept)

    assert sorted(p.name for p in (coll / "archive").iterdir()) == ["b.warc.gz", "c.warc.gz"]
    assert not (coll / "pages" / "pages.jsonl").exists()
    assert sorted(p.name for p in (coll / "warc-cdxj").iterdir()) == ["b.warc.gz.cdxj"]
    assert removed.deleted == 2 and removed.warnings == []
    assert removed.left_bytes == (coll / "archive" / "b.warc.gz").stat().st_size + len(later)


def test_a_wacz_that_is_not_a_zip_deletes_nothing_and_says_so(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": (warc := warc_bytes("http://a/1"))})
    (coll / f"{crawl.pk}.wacz").write_bytes(b"PK\x03\x04 cut short by a full disk")
    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0).files[0]

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept)

    assert (coll / "archive" / "a.warc.gz").read_bytes() == warc
    assert removed.deleted == 0 and removed.left_bytes == len(warc)
    assert "nothing deleted" in removed.warnings[0]


def test_warcs_of_a_crawler_killed_before_packaging_are_kept_byte_for_byte(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    clean = warc_bytes("http://a/1", "http://a/2")
    whole = warc_bytes("http://b/1", "http://b/2", body=os.urandom(5000))
    cut = whole[: len(whole) - 700]  # killed in the middle of its last record
    write_session(coll, {"a.warc.gz": clean, "b.warc.gz": cut})
    process = make_process(crawl)

    kept = archive.move_leftovers(data_dir, crawl, process, T0)
    archive.move_leftovers(data_dir, crawl, process, T0)

    prefix = f"archives/{crawl.pk}/{crawl.pk}-0-{process.pk}-"
    rows = {row.path: row for row in CrawlFile.objects.all()}
    assert sorted(rows) == [prefix + "a.warc.gz", prefix + "b.warc.gz"] and kept.warnings == []
    for name, data in (("a.warc.gz", clean), ("b.warc.gz", cut)):
        assert (data_dir / (prefix + name)).read_bytes() == data
        assert (rows[prefix + name].size, rows[prefix + name].sha256) == (len(data), sha256(data))
    assert org_bytes(crawl) == kept.added_bytes == len(clean) + len(cut)
    assert list((coll / "archive").iterdir()) == []
    assert urls_readable(data_dir / (prefix + "a.warc.gz")) == ["http://a/1", "http://a/2"]
    assert urls_readable(data_dir / (prefix + "b.warc.gz"))[0] == "http://b/1"


def urls_readable(path) -> list[str]:
    """The target URIs of the records a replay tool can read (up to a damaged end)."""
    urls = []
    try:
        for record in ArchiveIterator(io.BytesIO(path.read_bytes())):
            urls.append(record.rec_headers.get_header("WARC-Target-URI"))
            record.content_stream().read()
    except (ArchiveLoadFailed, EOFError, OSError):
        pass
    return urls


def test_leftovers_after_a_wacz_are_only_what_it_did_not_hold(data_dir, crawl, session):
    coll, _ = session
    (coll / "archive" / "late.warc.gz").write_bytes(late := warc_bytes("http://late/"))
    process = make_process(crawl)
    wacz = archive.collect_wacz(data_dir, crawl, process, T0).files[0]
    archive.forget_archived(data_dir, crawl.pk, 0, wacz)

    kept = archive.move_leftovers(data_dir, crawl, process, T0)

    assert [row.size for row in kept.files] == [len(late)]
    assert CrawlFile.objects.count() == 2


def test_unrecorded_archives_are_recorded_not_deleted(data_dir, crawl):
    folder = data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True)
    (folder / "x-0-9.wacz").write_bytes(data := b"PK an archive nobody recorded")
    (folder / ".x-0-9.wacz.1234.tmp").write_bytes(b"half a copy")

    kept = archive.adopt_unrecorded(data_dir, crawl, T0)
    again = archive.adopt_unrecorded(data_dir, crawl, T0)

    assert [(r.path, r.size, r.sha256) for r in kept.files] == [
        (f"archives/{crawl.pk}/x-0-9.wacz", len(data), sha256(data))]
    assert again.files == [] and org_bytes(crawl) == len(data)
    assert (folder / ".x-0-9.wacz.1234.tmp").exists()
    assert archive.archived_crawl_ids(data_dir) == [crawl.pk]


def test_deleting_a_crawls_files_removes_its_recorded_files_and_org_bytes(data_dir, crawl, session, tmp_path):
    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)
    host = tmp_path / "host"
    host.mkdir()
    (host / "precious").write_text("not the crawl's")
    before = tree_digest(host)
    CrawlFile.objects.create(crawl=crawl, path=os.path.relpath(host / "precious", data_dir), size=15,
                             sha256="0" * 64)
    crawl.org.add_bytes(15)

    removed = archive.delete_files(data_dir, crawl)

    assert not (data_dir / kept.files[0].path).exists()
    assert not (data_dir / "archives" / crawl.pk).exists()
    assert CrawlFile.objects.count() == 0 and org_bytes(crawl) == 0
    assert removed.deleted == 1 and removed.deleted_bytes == len(session[1]) + 15
    assert tree_digest(host) == before and "is not a file of archives/" in removed.warnings[0]


def test_config_is_written_as_a_new_file_readable_by_the_crawler(data_dir, crawl):
    archive.write_config(data_dir, crawl.pk, 0, "crawler.json", b'{"seeds": []}')
    archive.write_config(data_dir, crawl.pk, 0, "crawler.json", b'{"seeds": ["x"]}')

    path = data_dir / "crawls" / crawl.pk / "0" / "crawler.json"
    assert path.read_bytes() == b'{"seeds": ["x"]}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == ["crawler.json"]


def test_a_wacz_the_crawler_packaged_after_forgetting_holds_only_the_new_session(data_dir, crawl, session):
    coll, _ = session
    process = make_process(crawl)
    first = archive.collect_wacz(data_dir, crawl, process, T0).files[0]
    archive.forget_archived(data_dir, crawl.pk, 0, first)
    (coll / "archive" / "c.warc.gz").write_bytes(warc_bytes("http://c/1"))

    second_wacz = build_wacz(coll, crawl.pk)
    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)

    assert second_wacz is not None and len(kept.files) == 1
    assert CrawlFile.objects.count() == 2


@pytest.fixture
def crawls_on_another_disk(data_dir):
    """data_dir/crawls as an operator may place it: a link to a folder on another file system."""
    other = tempfile.mkdtemp(prefix="arun-crawls-", dir="/dev/shm")
    if os.stat(other).st_dev == os.stat(data_dir).st_dev:
        shutil.rmtree(other)
        pytest.skip("/dev/shm is on the data dir's file system")
    (data_dir / "crawls").symlink_to(other)
    yield
    shutil.rmtree(other)


def test_a_wacz_on_another_file_system_is_copied_exactly_then_removed(data_dir, crawl,
                                                                       crawls_on_another_disk):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": warc_bytes("http://a/1")})
    wacz = package(coll, crawl.pk).read_bytes()

    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)

    assert (data_dir / kept.files[0].path).read_bytes() == wacz and kept.warnings == []
    assert kept.files[0].sha256 == sha256(wacz)
    assert not (coll / f"{crawl.pk}.wacz").exists()
    assert os.listdir(data_dir / "archives" / crawl.pk) == [os.path.basename(kept.files[0].path)]


def test_the_size_cap_is_set_by_archiver_archive_max_bytes(data_dir, crawl):
    limits = archive.Limits.of(from_environ({"ARCHIVER_ARCHIVE_MAX_BYTES": str(2 << 20)}))
    wacz = collection(data_dir, crawl.pk) / f"{crawl.pk}.wacz"
    wacz.write_bytes(os.urandom(3 << 20))

    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0, limits)

    assert kept.files == [] and wacz.exists()
    assert f"over the limit of {2 << 20}" in kept.warnings[0]


def test_leftovers_moved_before_a_crash_are_recorded_once_by_the_next_look(data_dir, crawl):
    process = make_process(crawl)
    folder = data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True)
    (folder / f"{crawl.pk}-0-{process.pk}-a.warc.gz").write_bytes(warc := warc_bytes("http://a/"))

    kept = archive.move_leftovers(data_dir, crawl, process, T0)
    again = archive.move_leftovers(data_dir, crawl, process, T0)

    assert [row.sha256 for row in kept.files] == [sha256(warc)] and again.files == []
    assert org_bytes(crawl) == len(warc) and CrawlFile.objects.count() == 1


def test_a_leftover_warc_with_an_odd_name_is_kept_under_a_safe_one(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"-odd name é.warc.gz": (warc := warc_bytes("http://a/"))})
    process = make_process(crawl)

    kept = archive.move_leftovers(data_dir, crawl, process, T0)

    odd = hashlib.sha256("-odd name é.warc.gz".encode()).hexdigest()[:16]
    assert [row.path for row in kept.files] == [f"archives/{crawl.pk}/{crawl.pk}-0-{process.pk}-{odd}.warc.gz"]
    assert (data_dir / kept.files[0].path).read_bytes() == warc and kept.left_behind == 0


def test_a_wacz_with_folder_entries_and_logs_forgets_them_without_complaint(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": (warc := warc_bytes("http://a/"))})
    (coll / "logs").mkdir()
    (coll / "logs" / "crawl-1.log").write_text(log := '{"msg": "done"}\n')
    with zipfile.ZipFile(coll / f"{crawl.pk}.wacz", "w") as wacz:  # as other WACZ tools write them
        for name, data in (("archive/", b""), ("archive/a.warc.gz", warc), ("logs/", b""),
                           ("logs/crawl-1.log", log.encode()), ("indexes/index.cdxj", b"")):
            wacz.writestr(name, data)
    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0).files[0]

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept)

    assert removed.deleted == 2 and removed.warnings == [] and removed.left_bytes == 0
    assert os.listdir(coll / "archive") == os.listdir(coll / "logs") == []


def test_collecting_a_session_keeps_its_wacz_and_forgets_what_it_holds(data_dir, crawl, session):
    coll, wacz = session

    kept, removed = archive.collect_session(data_dir, crawl, make_process(crawl), T0)
    nothing, none = archive.collect_session(data_dir, crawl, make_process(crawl), T0)

    assert kept.added_bytes == len(wacz) and removed.deleted == 3 and removed.left_bytes == 0
    assert (nothing.files, none) == ([], None)


def owner_and_mode(path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def runners_own(data_dir) -> tuple[int, int, int]:
    return os.geteuid(), os.getegid(), 0o600


def test_a_kept_wacz_is_private_to_the_runner_whoever_wrote_it(data_dir, crawl, session):
    coll, _ = session
    wacz = coll / f"{crawl.pk}.wacz"
    os.chmod(wacz, 0o644)
    if os.geteuid() == 0:
        os.chown(wacz, 1000, 1000)  # as a container's user writes it

    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)

    assert owner_and_mode(data_dir / kept.files[0].path) == runners_own(data_dir)


def test_kept_leftover_warcs_are_private_to_the_runner(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": warc_bytes("http://a/1")})
    os.chmod(coll / "archive" / "a.warc.gz", 0o664)
    if os.geteuid() == 0:
        os.chown(coll / "archive" / "a.warc.gz", 1000, 1000)

    kept = archive.move_leftovers(data_dir, crawl, make_process(crawl), T0)

    assert owner_and_mode(data_dir / kept.files[0].path) == runners_own(data_dir)


def test_a_wacz_moved_before_a_crash_is_made_private_when_it_is_recorded(data_dir, crawl, session):
    coll, _ = session
    process = make_process(crawl)
    moved = data_dir / "archives" / crawl.pk / f"{crawl.pk}-0-{process.pk}.wacz"
    moved.parent.mkdir(parents=True)
    os.rename(coll / f"{crawl.pk}.wacz", moved)  # moved, then killed before anything else
    os.chmod(moved, 0o644)

    archive.collect_wacz(data_dir, crawl, process, T0)

    assert owner_and_mode(moved) == runners_own(data_dir)


def test_a_wacz_copied_from_another_file_system_is_private_to_the_runner(data_dir, crawl,
                                                                          crawls_on_another_disk):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": warc_bytes("http://a/1")})
    os.chmod(package(coll, crawl.pk), 0o644)

    kept = archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)

    assert owner_and_mode(data_dir / kept.files[0].path) == runners_own(data_dir)
