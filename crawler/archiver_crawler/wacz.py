"""WACZ packaging: a zip of every WARC in archive/, the pages, a CDXJ index and datapackage.json."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import zipfile
import zlib
from datetime import UTC, datetime
from pathlib import Path

from archiver_crawler import __version__
from archiver_crawler.dedup import required_archives
from archiver_crawler.signing import SigningFailed, signed_data
from archiver_crawler.warc import sidecar_index_path, url_key

logger = logging.getLogger(__name__)

WACZ_VERSION = "1.1.1"
_CHUNK = 1 << 20


def warc_files(collection_dir: Path) -> list[Path]:
    return sorted((collection_dir / "archive").glob("*.warc.gz"))


def write_index(target: Path, sizes: dict[Path, int], tmp: Path) -> None:
    """One sorted CDXJ for all WARCs: each WARC's sidecar index written when it was closed,
    or, when there is none (a killed session, or another instance still writing), what
    cdxj-indexer finds in its whole records; `sizes` is cut down to those records."""
    lines: list[str] = []
    for warc, size in sizes.items():
        sidecar = sidecar_index_path(warc)
        if sidecar.exists():
            lines += sidecar.read_text(encoding="utf-8").splitlines()
        else:
            sizes[warc] = whole_members_size(warc, size)
            lines += _index_snapshot(warc, sizes[warc], tmp)
    lines.sort()
    target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def whole_members_size(path: Path, size: int) -> int:
    """Bytes of `path` (up to `size`) made of complete gzip members: a WARC record cut short
    at the end would make the whole file unreadable to validators."""
    end = 0  # where the last complete member ends
    consumed = 0  # bytes of the current member seen so far
    decompressor = zlib.decompressobj(31)
    with open(path, "rb") as fh:
        data = _Limited(fh, size)
        buffer = b""
        while True:
            if not buffer:
                buffer = data.read(_CHUNK)
                if not buffer:
                    return end
            try:
                decompressor.decompress(buffer)
            except zlib.error:
                return end
            if decompressor.eof:
                end += consumed + len(buffer) - len(decompressor.unused_data)
                consumed = 0
                buffer = decompressor.unused_data
                decompressor = zlib.decompressobj(31)
            else:
                consumed += len(buffer)
                buffer = b""


def _index_snapshot(warc: Path, size: int, tmp: Path) -> list[str]:
    from cdxj_indexer.main import write_cdx_index  # slow to import; rarely needed
    from warcio.exceptions import ArchiveLoadFailed

    logger.info("indexing %s (no index was left beside it)", warc.name)
    snapshot = tmp / warc.name
    with open(warc, "rb") as src, open(snapshot, "wb") as dst:
        shutil.copyfileobj(_Limited(src, size), dst, _CHUNK)
    output = tmp / (warc.name + ".cdxj")
    try:
        write_cdx_index(str(output), [str(snapshot)], {})
    except (ArchiveLoadFailed, OSError, EOFError, zlib.error) as exc:
        logger.warning("index of %s stops at a damaged record: %s", warc.name, exc)
    snapshot.unlink()
    lines = output.read_text(encoding="utf-8").splitlines() if output.exists() else []
    return [_rekeyed(line) for line in lines]


def _rekeyed(line: str) -> str:
    """A cdxj-indexer line keyed as our own lines are (cdxj-indexer keys by the surt package,
    whose rule ReplayWeb.page does not follow; see url_key)."""
    key, stamp, fields = line.split(" ", 2)
    url = json.loads(fields).get("url")
    return f"{url_key(url) if url else key} {stamp} {fields}"


class _Limited:
    """A file read up to `size` bytes (a snapshot of a file another process may append to)."""

    def __init__(self, fh, size: int):
        self.fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        return data


def _pack(zf: zipfile.ZipFile, source, size: int, arcname: str, compression: int) -> dict:
    """Copy `size` bytes of `source` (a file object) into the zip, hashing exactly the bytes
    stored.

    A ZIP64 field goes in the entry's local header only when the central directory has one
    too (over 2 GiB): ReplayWeb.page (wabac.js ziprangereader) takes an entry whose central
    directory record has no extra field to start at 30 + name length past its local header,
    so a local-only ZIP64 field (force_zip64 on every entry, as before) made it read every
    entry 20 bytes early: the WARC, the index and the pages list came out as garbage and
    no page was found.
    """
    info = zipfile.ZipInfo(arcname, date_time=datetime.now().timetuple()[:6])
    info.compress_type = compression
    digest, written = hashlib.sha256(), 0
    with zf.open(info, "w", force_zip64=size > zipfile.ZIP64_LIMIT) as dst:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
            written += len(chunk)
    if written != size:
        raise OSError(f"{arcname}: {written} bytes packed, {size} expected")
    return {"name": Path(arcname).name.lower(), "path": arcname,
            "hash": "sha256:" + digest.hexdigest(), "bytes": written}


def _whole_lines(path: Path) -> bytes:
    """The file's lines that are whole JSON: the last one may be still being written, and a
    write cut short by a full disk leaves a torn line that the next append runs into."""
    data = path.read_bytes()
    data = data[: data.rfind(b"\n") + 1]
    whole = []
    for line in data.splitlines(keepends=True):
        try:
            json.loads(line)
        except ValueError:
            continue
        whole.append(line)
    return b"".join(whole)


def _digest(package_bytes: bytes, created: str, software: str, env=None) -> str:
    """datapackage-digest.json, signed (archiver_crawler/signing.py) when the environment
    (`env`, default the process's) says how. An archive that cannot be signed is still written, unsigned, and that is said:
    its pages matter more than its signature."""
    digest = {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(package_bytes).hexdigest()}
    try:
        signed = signed_data(digest["hash"], created, software, env)
    except (SigningFailed, ImportError) as exc:
        logger.error("the archive is not signed: %s", exc)
        signed = None
    if signed:
        digest["signedData"] = signed
    return json.dumps(digest, indent=2)


def build_wacz(collection_dir: Path, collection: str, main_page: str | None = None,
               sign_env: dict[str, str] | None = None) -> Path | None:
    """Write `<collection>.wacz` (atomically replacing the previous one); None if nothing to pack.
    `sign_env`: how to sign it, when not the process's environment (archiver's imports).

    Instances sharing the directory may still append to their WARC and to pages.jsonl: each
    file goes in as it was when its size was read, so hashes, index and content agree.
    """
    warcs = warc_files(collection_dir)
    if not warcs:
        logger.warning("no WARC files in %s; no WACZ written", collection_dir / "archive")
        return None
    sizes = {warc: warc.stat().st_size for warc in warcs}
    target = collection_dir / f"{collection}.wacz"
    with tempfile.TemporaryDirectory(dir=collection_dir, prefix=".wacz-") as tmp:
        index = Path(tmp) / "index.cdxj"
        write_index(index, sizes, Path(tmp))
        partial = Path(tmp) / "out.wacz"
        # Every entry is stored, not deflated: replay tools (ReplayWeb.page) read a WACZ's
        # members by byte range from its central directory, which needs them uncompressed.
        with zipfile.ZipFile(partial, "w", allowZip64=True) as zf:
            resources = []
            for warc, size in sizes.items():
                with open(warc, "rb") as fh:
                    resources.append(_pack(zf, _Limited(fh, size), size,
                                           f"archive/{warc.name}", zipfile.ZIP_STORED))
            with open(index, "rb") as fh:
                resources.append(_pack(zf, fh, index.stat().st_size, "indexes/index.cdxj",
                                       zipfile.ZIP_STORED))
            for name in ("pages.jsonl", "extraPages.jsonl"):
                pages = collection_dir / "pages" / name
                if pages.exists():
                    lines = _whole_lines(pages)
                    resources.append(_pack(zf, io.BytesIO(lines), len(lines), f"pages/{name}",
                                           zipfile.ZIP_STORED))
            created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            software = f"archiver-crawler {__version__}"
            package = {
                "profile": "data-package",
                "resources": resources,
                "title": collection,
                "created": created,
                "wacz_version": WACZ_VERSION,
                "software": software,
            }
            if main_page:
                package["mainPageURL"] = main_page
            requires = required_archives(collection_dir)
            if requires:
                # The archives this one's revisit records point into (Browsertrix's field).
                package["relation"] = {"requires": requires}
            package_bytes = json.dumps(package, indent=2).encode()
            zf.writestr("datapackage.json", package_bytes, compress_type=zipfile.ZIP_STORED)
            zf.writestr("datapackage-digest.json", _digest(package_bytes, created, software, sign_env),
                        compress_type=zipfile.ZIP_STORED)
        os.replace(partial, target)
    logger.info("wrote %s from %d WARC file(s)", target, len(warcs))
    return target
