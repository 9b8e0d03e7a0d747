"""Real files for the archive tests: WARCs written with warcio, WACZs packaged by archiver's
crawler, hostile zips, and a digest of a folder tree to prove nothing outside changed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import zipfile
from pathlib import Path

from archiver_crawler.wacz import build_wacz
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawls.models import Crawl, Process


def warc_bytes(*urls: str, body: bytes = b"<html>hello</html>") -> bytes:
    """A gzipped WARC with one response record per URL."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    for url in urls:
        headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        payload = body + url.encode()
        record = writer.create_warc_record(url, "response", payload=io.BytesIO(payload),
                                           length=len(payload), http_headers=headers)
        writer.write_record(record)
    return out.getvalue()


def wacz_with_pages(*urls: str) -> bytes:
    """A WACZ of only a page list (as the real crawler writes it) and a dummy WARC."""
    lines = [json.dumps({"format": "json-pages-1.0", "id": "pages"})]
    lines += [json.dumps({"url": url, "status": 200, "loadState": 4}) for url in urls]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wacz:
        wacz.writestr("pages/pages.jsonl", "\n".join(lines) + "\n")
        wacz.writestr("archive/rec-1.warc.gz", b"warc")
    return buffer.getvalue()


def wacz_of(urls: list[str]) -> bytes:
    """A WACZ with a datapackage, a page list of `urls` and a 1,000-byte dummy WARC."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wacz:
        wacz.writestr("datapackage.json", json.dumps({"profile": "data-package", "resources": []}))
        lines = [{"format": "json-pages-1.0", "id": "pages"}]
        lines += [{"url": url, "ts": "2030-01-01T12:00:00Z", "loadState": 4} for url in urls]
        wacz.writestr("pages/pages.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
        wacz.writestr("archive/data.warc.gz", b"w" * 1000)
    return buffer.getvalue()


def collection(data_dir: Path, crawl_id: str, instance: int = 0) -> Path:
    path = data_dir / "crawls" / crawl_id / str(instance) / "collections" / crawl_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def sidecar_index(name: str, data: bytes) -> str:
    """The per-WARC CDXJ our crawler writes beside a WARC it closed (warc-cdxj/<warc>.cdxj)."""
    lines = []
    records = ArchiveIterator(io.BytesIO(data))
    with contextlib.suppress(ArchiveLoadFailed, EOFError, OSError):  # up to a damaged end
        for record in records:
            url = record.rec_headers.get_header("WARC-Target-URI")
            record.content_stream().read()
            entry = {"url": url, "offset": records.get_record_offset(),
                     "length": records.get_record_length(), "filename": name}
            lines.append(f"{url} 20300101000000 {json.dumps(entry)}\n")
    return "".join(lines)


def write_session(coll: Path, warcs: dict[str, bytes], pages: list[str] = ()) -> None:
    """What a crawler session leaves before packaging: WARCs with their indexes, a page list."""
    (coll / "archive").mkdir(exist_ok=True)
    (coll / "warc-cdxj").mkdir(exist_ok=True)
    for name, data in warcs.items():
        (coll / "archive" / name).write_bytes(data)
        (coll / "warc-cdxj" / f"{name}.cdxj").write_text(sidecar_index(name, data))
    (coll / "pages").mkdir(exist_ok=True)
    lines = [json.dumps({"format": "json-pages-1.0", "id": "pages"})]
    lines += [json.dumps({"url": url, "ts": "2030-01-01T00:00:00Z"}) for url in pages]
    (coll / "pages" / "pages.jsonl").write_text("\n".join(lines) + "\n")


def package(coll: Path, crawl_id: str) -> Path:
    """A WACZ packaged by archiver's own crawler, as a session leaves it."""
    wacz = build_wacz(coll, crawl_id)
    assert wacz is not None and wacz.name == f"{crawl_id}.wacz"
    return wacz


def hostile_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data)
    return path


def tree_digest(root: Path) -> str:
    """Names, kinds, sizes, link targets and contents of everything under `root`."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(folder) / name
            st = path.lstat()
            digest.update(f"{path.relative_to(root)} {stat.S_IFMT(st.st_mode)} {st.st_size}".encode())
            if stat.S_ISLNK(st.st_mode):
                digest.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                digest.update(path.read_bytes())
    return digest.hexdigest()


def make_process(crawl: Crawl, instance: int = 0) -> Process:
    return Process.objects.create(crawl=crawl, instance=instance, hostname=f"crawl-{instance}",
                                  launcher="local")
