"""`archiver import`: a WARC written by wget and a WACZ written by py-wacz, each of a site on
127.0.0.1, become an item of the org whose pages are listed, searchable and in the dedup
index; hostile archives are refused with nothing left behind (issue 43)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from crawls import dedup, search
from crawls.models import Crawl, CrawlFile, CrawlOrigin, Org, PayloadDigest, Snapshot
from runner import indexing
from tests import bombs

WACZ = str(Path(sys.executable).parent / "wacz")  # py-wacz's command
pytestmark = pytest.mark.django_db

PAGES = {
    "index.html": ("Harbour notes", "The lighthouse keeper climbed {n} steps.",
                   ["tide.html", "logo.png"]),
    "tide.html": ("Tide tables of {n}", "Low water at the {n} quay, said the ferryman.", []),
}


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output stays the test's
        pass


@contextmanager
def site(root: Path, words: str) -> Iterator[str]:
    """A static site of PAGES (their text holding `words`) on 127.0.0.1; its URL."""
    root.mkdir()
    for name, (title, text, links) in PAGES.items():
        anchors = "".join(f'<img src="{link}">' if link.endswith(".png") else
                          f'<a href="{link}">{link}</a>' for link in links)
        (root / name).write_text(f"<!doctype html><html><head><title>{title.format(n=words)}</title></head>"
                                 f"<body><p>{text.format(n=words)}</p>{anchors}</body></html>")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"logo of " + words.encode())
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def wget_warc(url: str, folder: Path) -> Path:
    """The site as `wget --recursive --warc-file` archives it: folder/site.warc.gz."""
    subprocess.run(["wget", "--quiet", "--recursive", "--level=2", "--no-parent",
                    "--execute", "robots=off", f"--warc-file={folder / 'site'}",
                    "--directory-prefix", str(folder / "mirror"), url],
                   check=False, timeout=60, capture_output=True)  # 8: the site has 404s
    assert (folder / "site.warc.gz").is_file()
    return folder / "site.warc.gz"


def kept_and_indexed(data_dir: Path, crawl: Crawl) -> list[CrawlFile]:
    """The import's files, indexed for search and dedup as the daemon's periodic steps do."""
    from archiver import conf

    files = list(crawl.files.all())
    for row in files:
        indexing.index_file(data_dir, row, row.created_at)
        dedup.index_file(row, conf.get())
    return files


def imported(*paths: Path, org: str = "default") -> Crawl:
    out = io.StringIO()
    call_command("import", *map(str, paths), "--org", org, "--json", stdout=out)
    return Crawl.objects.get(pk=json.loads(out.getvalue())["id"])


def test_a_warc_written_by_wget_is_imported_searchable_and_deduplicated(conf_data_dir, tmp_path):
    with site(tmp_path / "site", "eleventy") as url:
        warc = wget_warc(url, tmp_path)
    crawl = imported(warc)
    assert (crawl.origin, crawl.status) == (CrawlOrigin.IMPORT, "complete")
    (row,) = kept_and_indexed(conf_data_dir, crawl)
    assert (conf_data_dir / row.path).is_file()
    assert zipfile.ZipFile(conf_data_dir / row.path).testzip() is None
    subprocess.run([WACZ, "validate", "-f", str(conf_data_dir / row.path)],
                   check=True, timeout=60, capture_output=True)
    pages = dict(Snapshot.objects.filter(crawl=crawl).values_list("url", "title"))
    assert pages == {url: "Harbour notes", url.replace("index", "tide"): "Tide tables of eleventy"}
    assert set(Snapshot.objects.filter(crawl=crawl).values_list("filename", flat=True)) == {
        row.path.rsplit("/", 1)[-1]}
    (hit,) = search.search("lighthouse keeper")
    assert (hit.url, hit.crawl_id) == (url, crawl.pk)
    logo = PayloadDigest.objects.filter(url=url.replace("index.html", "logo.png")).get()
    assert logo.crawl_file_id == row.pk
    assert crawl.org.bytes_stored == row.size


def test_a_wacz_written_by_py_wacz_is_imported_with_its_page_list(conf_data_dir, tmp_path):
    with site(tmp_path / "site", "marmalade") as url:
        warc = wget_warc(url, tmp_path)
    wacz = tmp_path / "made.wacz"
    subprocess.run([WACZ, "create", "--detect-pages", "--text", "-o", str(wacz),
                    str(warc)], check=True, timeout=60, capture_output=True)
    crawl = imported(wacz)
    (row,) = kept_and_indexed(conf_data_dir, crawl)
    assert (conf_data_dir / row.path).read_bytes() == wacz.read_bytes()  # kept as it is
    # py-wacz lists the pages it detects, with their titles and no text (its --text wrote
    # none here): the page list is taken as it is, and its titles are searchable.
    assert url in set(Snapshot.objects.filter(crawl=crawl).values_list("url", flat=True))
    assert [hit.url for hit in search.search("harbour")] == [url]


# --- hostile imports ------------------------------------------------------------------------


def warc_record(body: bytes, length: int | None = None) -> bytes:
    head = (f"WARC/1.0\r\nWARC-Type: resource\r\nWARC-Target-URI: http://a.test/\r\n"
            f"WARC-Date: 2026-12-01T10:00:00Z\r\nWARC-Record-ID: <urn:uuid:1>\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n")
    return head.encode() + body + b"\r\n\r\n"


def zip_with(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def lying_wacz() -> bytes:
    warc = gzip.compress(warc_record(b"hello"))
    package = {"resources": [{"path": "archive/a.warc.gz", "hash": "sha256:" + "0" * 64,
                              "bytes": len(warc)}]}
    return zip_with({"archive/a.warc.gz": warc, "indexes/index.cdxj": b"",
                     "datapackage.json": json.dumps(package).encode()})


def gzip_bomb() -> bytes:
    """A record claiming 2 GiB, then a gzip member of zeros that never ends (2 MB, ~2 GiB
    inflated): one deflated MiB, full-flushed so that it may be repeated (tests/bombs.py)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = squeeze.compress(b"\0" * (1 << 20)) + squeeze.flush(zlib.Z_FULL_FLUSH)
    member = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * 2048
    return gzip.compress(warc_record(b"", length=2 << 30)[:-4]) + member


def pages_bomb() -> bytes:
    """A WACZ whose datapackage holds, but whose page list is 64 MiB of newlines."""
    warc = gzip.compress(warc_record(b"hello"))
    package = {"resources": [{"path": "archive/a.warc.gz", "bytes": len(warc),
                              "hash": "sha256:" + hashlib.sha256(warc).hexdigest()}]}
    return zip_with({"archive/a.warc.gz": warc, "indexes/index.cdxj": b"",
                     "datapackage.json": json.dumps(package).encode(),
                     "pages/pages.jsonl": bombs.HEAD + b"\n" * (64 << 20)})


HOSTILE = {
    "not an archive": (lambda: b"<html>hello</html>", "not a WARC, WARC.gz or WACZ"),
    "a newline bomb in pages.jsonl": (pages_bomb, "page lists have over"),
    "a gzip bomb": (gzip_bomb, "gzip bomb"),
    "a cut gzip": (lambda: gzip.compress(warc_record(b"x" * 5000))[:-30], "gzip"),
    "a damaged gzip": (lambda: b"\x1f\x8b\x08\x00" + b"\xff" * 200, "gzip is damaged"),
    "a huge record": (lambda: warc_record(b"short", length=1 << 50), "claims"),
    "a record cut short": (lambda: warc_record(b"short", length=5000)[:-4], "cut short"),
    "bytes between records": (lambda: warc_record(b"a") + b"junk\r\n" + warc_record(b"b"),
                              "no WARC record at byte"),
    "a lying datapackage": (lying_wacz, "hashes to"),
    "a path trick": (lambda: zip_with({"../../etc/passwd": b"x", "datapackage.json": b"{}"}),
                     "outside the archive"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_archive_is_refused_and_nothing_is_left(conf_data_dir, tmp_path, case):
    make, said = HOSTILE[case]
    path = tmp_path / "hostile"
    path.write_bytes(make())
    with pytest.raises(CommandError, match=said):
        call_command("import", str(path))
    assert_nothing_left(conf_data_dir)


def test_one_bad_file_of_several_leaves_nothing_of_the_others(conf_data_dir, tmp_path):
    good = tmp_path / "good.warc"
    good.write_bytes(warc_record(b"fine"))
    bad = tmp_path / "bad.warc.gz"
    bad.write_bytes(gzip.compress(warc_record(b"x" * 5000))[:-30])
    with pytest.raises(CommandError, match="bad.warc.gz: its gzip is cut short"):
        call_command("import", str(good), str(bad))
    assert_nothing_left(conf_data_dir)


def test_an_import_of_records_that_are_no_page_is_listed_by_status(conf_data_dir, tmp_path):
    path = tmp_path / "a.warc"
    path.write_bytes(warc_record(b"no page"))
    crawl = imported(path)
    assert crawl.seeds == ["http://a.test/"]  # its first record's, shown where seeds are
    out = io.StringIO()
    call_command("status", stdout=out)
    assert crawl.short_id in out.getvalue()


def test_an_import_over_the_orgs_quota_is_refused(conf_data_dir, tmp_path):
    Org.objects.filter(slug="default").update(storage_quota_bytes=100)
    path = tmp_path / "a.warc"
    path.write_bytes(warc_record(b"x" * 500))
    with pytest.raises(CommandError, match="storage quota"):
        call_command("import", str(path))
    assert_nothing_left(conf_data_dir)


def assert_nothing_left(data_dir: Path) -> None:
    assert not Crawl.objects.exists()
    assert not CrawlFile.objects.exists()
    assert Org.objects.get(slug="default").bytes_stored == 0
    # archiver's signing key may have been made meanwhile: it is no part of the import
    assert [p for top in ("archives", "imports") for p in (data_dir / top).rglob("*")] == []


def test_a_signed_wacz_is_verified_as_it_is_imported_and_the_result_kept(conf_data_dir, tmp_path):
    warc = tmp_path / "a.warc"
    warc.write_bytes(warc_record(b"signed words"))
    first = imported(warc).files.get()  # packaged here, and signed with archiver's key
    assert (first.verify_ok, first.signer.startswith("this archiver")) == (True, True)
    copy = tmp_path / "exported.wacz"
    copy.write_bytes((conf_data_dir / first.path).read_bytes())
    again = imported(copy).files.get()
    assert (again.verify_ok, again.verified_at is not None) == (True, True)
    assert again.signer and "this archiver" in again.signer


def test_a_multi_wacz_becomes_one_item_with_each_of_its_waczs(conf_data_dir, tmp_path):
    from archiver import conf

    parts = {}
    for n in (1, 2):
        warc = tmp_path / f"{n}.warc"
        warc.write_bytes(warc_record(f"part {n}".encode()))
        kept = imported(warc).files.get()
        parts[f"part-{n}.wacz"] = (conf.get().data_dir / kept.path).read_bytes()
    package = {"profile": "multi-wacz-package", "resources": [
        {"path": name, "bytes": len(data), "hash": "sha256:" + hashlib.sha256(data).hexdigest()}
        for name, data in parts.items()]}
    multi = tmp_path / "collection.wacz"
    multi.write_bytes(zip_with({**parts, "datapackage.json": json.dumps(package).encode()}))
    crawl = imported(multi)
    assert sorted(f.sha256 for f in crawl.files.all()) == sorted(
        hashlib.sha256(data).hexdigest() for data in parts.values())


def test_what_a_killed_import_left_is_removed_by_the_next_one(conf_data_dir, tmp_path):
    import os
    import time

    left = conf_data_dir / "imports" / ("0" * 32)
    (left / "half").mkdir(parents=True)
    (left / "half" / "a.warc.gz").write_bytes(b"half")
    upload = conf_data_dir / "imports" / "upload-1"
    upload.write_bytes(b"half")
    recent = conf_data_dir / "imports" / "upload-2"  # another import's, under way
    recent.write_bytes(b"under way")
    day_ago = time.time() - 2 * 86400
    for path in (left, upload):
        os.utime(path, (day_ago, day_ago))
    warc = tmp_path / "a.warc"
    warc.write_bytes(warc_record(b"fine"))
    imported(warc)
    assert sorted(p.name for p in (conf_data_dir / "imports").iterdir()) == ["upload-2"]


def test_a_wacz_listing_no_page_has_its_pages_found_in_its_records(conf_data_dir, tmp_path):
    with site(tmp_path / "site", "quayside") as url:
        warc = wget_warc(url, tmp_path)
    wacz = tmp_path / "bare.wacz"
    subprocess.run([WACZ, "create", "-o", str(wacz), str(warc)], check=True, timeout=60,
                   capture_output=True)
    with zipfile.ZipFile(wacz) as zf:
        assert not [n for n in zf.namelist() if n.startswith("pages/") and zf.read(n).count(b"\n") > 1]
    crawl = imported(wacz)
    kept_and_indexed(conf_data_dir, crawl)
    tide = url.replace("index", "tide")
    assert set(Snapshot.objects.filter(crawl=crawl).values_list("url", flat=True)) == {url, tide}
    assert [hit.url for hit in search.search("ferryman quayside")] == [tide]
