"""The file boundary against a hostile crawler: each plant in its instance folder (links to
host files and folders, /dev/zero, FIFOs, device nodes, huge sparse files, hard links, zips
with traversing or absurd directories) yields a readable warning, no hang, and nothing
outside the folder read, written or deleted (a host tree is hashed before and after)."""

from __future__ import annotations

import datetime as dt
import os
import stat
import struct
import time
import zipfile

import pytest

from crawls.models import CrawlFile
from runner import archive
from tests.runner.archive_helpers import (
    collection,
    hostile_zip,
    make_process,
    package,
    tree_digest,
    warc_bytes,
    write_session,
)
from tests.waiting import HANG

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]


@pytest.fixture
def crawl(make_crawl):
    return make_crawl()


@pytest.fixture
def host(tmp_path):
    """A host folder the crawler must never reach: a secret, and a file named like a WARC."""
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "shadow").write_text("root:secret-hash:19000::::::\n")
    (root / "a.warc.gz").write_bytes(b"the host's own file, 33 bytes..\n")
    return root


@pytest.fixture
def untouched(host):
    """Asserts after the test that the host tree is exactly as it was."""
    before = tree_digest(host)
    yield host
    assert tree_digest(host) == before


def collect(data_dir, crawl):
    return archive.collect_wacz(data_dir, crawl, make_process(crawl), T0)


def test_a_crawler_json_link_to_a_host_file_is_replaced_not_followed(data_dir, crawl, untouched):
    folder = data_dir / "crawls" / crawl.pk / "0"
    folder.mkdir(parents=True)
    (folder / "crawler.json").symlink_to(untouched / "etc" / "shadow")

    archive.write_config(data_dir, crawl.pk, 0, "crawler.json", b'{"seeds": []}')

    assert not (folder / "crawler.json").is_symlink()
    assert (folder / "crawler.json").read_bytes() == b'{"seeds": []}'


def test_an_instance_folder_replaced_by_a_link_is_refused_for_the_config(data_dir, crawl, untouched):
    (data_dir / "crawls" / crawl.pk).mkdir(parents=True)
    (data_dir / "crawls" / crawl.pk / "0").symlink_to(untouched / "etc")

    with pytest.raises(archive.Refused, match="0 is a symbolic link, not a folder"):
        archive.write_config(data_dir, crawl.pk, 0, "crawler.json", b"{}")


def test_an_archive_folder_linked_to_a_host_folder_loses_no_host_file(data_dir, crawl, untouched):
    coll = collection(data_dir, crawl.pk)
    (coll / "archive").symlink_to(untouched)
    hostile_zip(coll / f"{crawl.pk}.wacz",
                {"archive/a.warc.gz": (untouched / "a.warc.gz").read_bytes()})
    kept = collect(data_dir, crawl)

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept.files[0])

    assert removed.deleted == 0 and removed.left_bytes == 0
    assert removed.warnings == ["instance 0: archive is a symbolic link, not a folder; left alone"]


def test_a_collection_linked_to_a_host_folder_is_not_collected_from(data_dir, crawl, host):
    coll = collection(data_dir, crawl.pk)
    os.rmdir(coll)
    hostile_zip(host / f"{crawl.pk}.wacz", {"archive/a.warc.gz": b"x"})
    coll.symlink_to(host)
    before = tree_digest(host)

    kept = collect(data_dir, crawl)

    assert tree_digest(host) == before

    assert kept.files == [] and CrawlFile.objects.count() == 0
    assert kept.warnings == [f"instance 0's WACZ: {crawl.pk} is a symbolic link, not a folder; left alone"]


@pytest.mark.parametrize("plant", ["link to /dev/zero", "FIFO", "device node", "link to a host file"])
def test_a_wacz_that_is_not_a_regular_file_is_never_read(data_dir, crawl, untouched, plant):
    wacz = collection(data_dir, crawl.pk) / f"{crawl.pk}.wacz"
    if plant == "link to /dev/zero":
        wacz.symlink_to("/dev/zero")
    elif plant == "FIFO":
        os.mkfifo(wacz)
    elif plant == "device node":
        try:
            os.mknod(wacz, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("mknod needs root")
    else:
        wacz.symlink_to(untouched / "etc" / "shadow")

    started = time.monotonic()
    kept = collect(data_dir, crawl)

    assert time.monotonic() - started < HANG  # a FIFO or /dev/zero read would never end
    kind = {"FIFO": "a FIFO", "device node": "a character device"}.get(plant, "a symbolic link")
    assert kept.warnings == [f"instance 0's WACZ: {crawl.pk}.wacz is {kind}, not a regular file; left alone"]
    assert kept.files == [] and CrawlFile.objects.count() == 0
    assert os.lstat(wacz)  # left where it was
    assert os.listdir(data_dir / "archives" / crawl.pk) == []


def test_a_huge_sparse_wacz_is_refused_by_the_size_cap_without_being_read(data_dir, crawl,
                                                                         monkeypatch):
    wacz = collection(data_dir, crawl.pk) / f"{crawl.pk}.wacz"
    with open(wacz, "wb") as handle:
        handle.truncate(100 << 30)
    read, pread = [], os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:
        if os.fstat(fd).st_ino == wacz.stat().st_ino:
            read.append(size)
        return pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counted)  # how runner/archive.py reads (read_at)
    kept = collect(data_dir, crawl)

    assert read == []
    assert kept.warnings == [f"instance 0's WACZ: {crawl.pk}.wacz is {100 << 30} bytes, over the "
                             f"limit of {archive.Limits().file_bytes}; left alone"]
    assert kept.files == [] and wacz.stat().st_size == 100 << 30


def test_a_wacz_hard_linked_to_a_host_file_is_refused(data_dir, crawl, untouched):
    wacz = collection(data_dir, crawl.pk) / f"{crawl.pk}.wacz"
    os.link(untouched / "etc" / "shadow", wacz)

    kept = collect(data_dir, crawl)

    assert kept.warnings == [f"instance 0's WACZ: {crawl.pk}.wacz has 2 hard links; left alone"]
    assert kept.files == []


def test_wacz_members_with_traversing_names_delete_nothing_outside(data_dir, crawl, untouched):
    coll = collection(data_dir, crawl.pk)
    (coll / "archive").mkdir()
    secret = (untouched / "etc" / "shadow").read_bytes()
    (coll / "archive" / "keep.warc.gz").write_bytes(secret)  # same size, so only names protect
    names = ["archive/../../../../../../../../" + str(untouched / "etc" / "shadow"),
             str(untouched / "etc" / "shadow"), "../archive/keep.warc.gz", "archive/sub/keep.warc.gz",
             "archive/..", "pages/../../../x", "archive\\..\\keep.warc.gz"]
    hostile_zip(coll / f"{crawl.pk}.wacz", dict.fromkeys(names, secret))
    kept = collect(data_dir, crawl)

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept.files[0])

    assert (coll / "archive" / "keep.warc.gz").exists() and removed.deleted == 0
    assert "lists 7 entries outside its folders" in removed.warnings[0]


def test_a_zip_claiming_millions_of_entries_is_refused_before_it_is_parsed(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": warc_bytes("http://a/")})
    wacz = coll / f"{crawl.pk}.wacz"
    # An end record claiming 60,000 entries in a 3 GB directory, behind no directory at all.
    wacz.write_bytes(b"PK\x03\x04" + b"\0" * 100 + b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 60000,
                                                                             60000, 3 << 30, 0, 0))
    kept = collect(data_dir, crawl)

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept.files[0])

    assert removed.deleted == 0 and (coll / "archive" / "a.warc.gz").exists()
    assert "a zip claiming 60000 entries in 3221225472 bytes of directory" in removed.warnings[0]


def test_the_entry_limit_reads_a_zip64_end_record(data_dir, crawl):
    coll = collection(data_dir, crawl.pk)
    with zipfile.ZipFile(coll / f"{crawl.pk}.wacz", "w") as many:  # over 65535: a zip64 end record
        for n in range(65536):
            many.writestr(f"logs/{n}", b"")
    kept = collect(data_dir, crawl)

    refused = archive.forget_archived(data_dir, crawl.pk, 0, kept.files[0],
                                      archive.Limits(zip_entries=65535))
    read = archive.forget_archived(data_dir, crawl.pk, 0, kept.files[0],
                                   archive.Limits(zip_entries=65536, zip_directory_bytes=8 << 20))

    assert "a zip claiming 65536 entries in" in refused.warnings[0]
    assert read.warnings == []


def test_session_files_that_became_links_or_fifos_are_not_deleted(data_dir, crawl, untouched):
    coll = collection(data_dir, crawl.pk)
    write_session(coll, {"a.warc.gz": (warc := warc_bytes("http://a/")), "b.warc.gz": b"b"})
    package(coll, crawl.pk)
    kept = collect(data_dir, crawl)
    (coll / "archive" / "a.warc.gz").unlink()
    (coll / "archive" / "a.warc.gz").symlink_to(untouched / "a.warc.gz")  # 33 bytes, like nothing
    (coll / "archive" / "b.warc.gz").unlink()
    os.mkfifo(coll / "archive" / "b.warc.gz")

    removed = archive.forget_archived(data_dir, crawl.pk, 0, kept.files[0])

    assert removed.deleted == 1  # pages.jsonl only
    assert (coll / "archive" / "a.warc.gz").is_symlink() and len(warc) != 33
    assert sorted(removed.warnings) == ["archive/a.warc.gz is a symbolic link, not a regular file; left alone",
                                        "archive/b.warc.gz is a FIFO, not a regular file; left alone"]


def test_leftover_links_and_devices_are_not_kept(data_dir, crawl, untouched):
    coll = collection(data_dir, crawl.pk)
    (coll / "archive").mkdir()
    (coll / "archive" / "a.warc.gz").symlink_to(untouched / "a.warc.gz")
    (coll / "archive" / "z.warc.gz").symlink_to("/dev/zero")
    os.mkfifo(coll / "archive" / "f.warc.gz")
    (coll / "archive" / "ok.warc.gz").write_bytes(ok := warc_bytes("http://ok/"))

    kept = archive.move_leftovers(data_dir, crawl, make_process(crawl), T0)

    assert [row.size for row in kept.files] == [ok.__len__()]
    assert kept.left_behind == len(kept.warnings) == 3
    assert all("left alone" in w for w in kept.warnings)
    assert (coll / "archive" / "a.warc.gz").is_symlink()


def test_an_archives_entry_that_is_not_a_regular_file_is_not_adopted(data_dir, crawl, untouched):
    folder = data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True)
    (folder / "x-0-1.wacz").symlink_to(untouched / "etc" / "shadow")

    kept = archive.adopt_unrecorded(data_dir, crawl, T0)

    assert kept.files == [] and CrawlFile.objects.count() == 0
    assert kept.warnings == ["archives: x-0-1.wacz is a symbolic link, not a regular file; left alone"]


def test_a_recorded_path_outside_archives_is_never_deleted(data_dir, crawl, untouched):
    for path in ("../" * 12 + str(untouched / "etc" / "shadow")[1:], f"archives/{crawl.pk}/../../x.wacz",
                 str(untouched / "etc" / "shadow"), f"archives/{crawl.pk}/sub/x.wacz"):
        CrawlFile.objects.create(crawl=crawl, path=path, size=1, sha256="0" * 64)

    removed = archive.delete_files(data_dir, crawl)

    assert removed.deleted == 0 and len(removed.warnings) == 4
    assert CrawlFile.objects.count() == 0


@pytest.mark.parametrize("plant", ["FIFO", "link to /dev/zero", "link to a host file"])
def test_a_log_planted_as_a_fifo_or_link_is_refused_without_blocking(data_dir, crawl, untouched, plant):
    folder = data_dir / "crawls" / crawl.pk / "0"
    folder.mkdir(parents=True)
    log = folder / "process-7.log"
    if plant == "FIFO":
        os.mkfifo(log)
    else:
        log.symlink_to("/dev/zero" if plant == "link to /dev/zero" else untouched / "etc" / "shadow")

    started = time.monotonic()
    with pytest.raises(archive.Refused, match="process-7.log is a"):
        archive.read_tail(data_dir, crawl.pk, 0, "process-7.log")
    assert time.monotonic() - started < HANG  # a FIFO or /dev/zero read would never end


def test_the_tail_of_a_real_log_is_its_last_bytes(data_dir, crawl):
    folder = data_dir / "crawls" / crawl.pk / "0"
    folder.mkdir(parents=True)
    (folder / "process-7.log").write_bytes(b"x" * 100_000 + b"last line\n")

    assert archive.read_tail(data_dir, crawl.pk, 0, "process-7.log", 10) == b"last line\n"
    assert archive.read_tail(data_dir, crawl.pk, 0, "process-8.exit") == b""
