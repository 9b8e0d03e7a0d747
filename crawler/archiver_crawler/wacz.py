"""WACZ packaging: a zip of every WARC in archive/, the pages, a CDXJ index and datapackage.json."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from archiver_crawler import __version__
from archiver_crawler.warc import sidecar_index_path

logger = logging.getLogger(__name__)

WACZ_VERSION = "1.1.1"
_CHUNK = 1 << 20


def _sha256_file(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return "sha256:" + digest.hexdigest(), size


def warc_files(collection_dir: Path) -> list[Path]:
    return sorted((collection_dir / "archive").glob("*.warc.gz"))


def write_index(target: Path, warcs: list[Path], tmp: Path) -> None:
    """One sorted CDXJ for all WARCs: each WARC's sidecar index written when it was closed,
    or cdxj-indexer reading the WARC when there is none (a session that was killed)."""
    lines: list[str] = []
    for warc in warcs:
        sidecar = sidecar_index_path(warc)
        if sidecar.exists():
            lines += sidecar.read_text(encoding="utf-8").splitlines()
            continue
        from cdxj_indexer.main import write_cdx_index  # slow to import; rarely needed

        logger.info("indexing %s (no index was left beside it)", warc.name)
        partial = tmp / (warc.name + ".cdxj")
        write_cdx_index(str(partial), [str(warc)], {})
        lines += partial.read_text(encoding="utf-8").splitlines()
    lines.sort()
    target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def build_wacz(collection_dir: Path, collection: str, main_page: str | None = None) -> Path | None:
    """Write `<collection>.wacz` (atomically replacing the previous one); None if nothing to pack."""
    warcs = warc_files(collection_dir)
    if not warcs:
        logger.warning("no WARC files in %s; no WACZ written", collection_dir / "archive")
        return None
    target = collection_dir / f"{collection}.wacz"
    with tempfile.TemporaryDirectory(dir=collection_dir, prefix=".wacz-") as tmp:
        index = Path(tmp) / "index.cdxj"
        write_index(index, warcs, Path(tmp))
        members: list[tuple[Path, str, int]] = [
            (w, f"archive/{w.name}", zipfile.ZIP_STORED) for w in warcs]
        members.append((index, "indexes/index.cdxj", zipfile.ZIP_DEFLATED))
        for name in ("pages.jsonl", "extraPages.jsonl"):
            pages = collection_dir / "pages" / name
            if pages.exists():
                members.append((pages, f"pages/{name}", zipfile.ZIP_DEFLATED))

        partial = Path(tmp) / "out.wacz"
        with zipfile.ZipFile(partial, "w", allowZip64=True) as zf:
            resources = []
            for path, arcname, compression in members:
                zf.write(path, arcname, compress_type=compression)
                digest, size = _sha256_file(path)
                resources.append({"name": Path(arcname).name.lower(), "path": arcname,
                                  "hash": digest, "bytes": size})
            package = {
                "profile": "data-package",
                "resources": resources,
                "title": collection,
                "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "wacz_version": WACZ_VERSION,
                "software": f"archiver-crawler {__version__}",
            }
            if main_page:
                package["mainPageURL"] = main_page
            package_bytes = json.dumps(package, indent=2).encode()
            zf.writestr("datapackage.json", package_bytes, compress_type=zipfile.ZIP_DEFLATED)
            digest = {"path": "datapackage.json",
                      "hash": "sha256:" + hashlib.sha256(package_bytes).hexdigest()}
            zf.writestr("datapackage-digest.json", json.dumps(digest, indent=2),
                        compress_type=zipfile.ZIP_DEFLATED)
        os.replace(partial, target)
    logger.info("wrote %s from %d WARC file(s)", target, len(warcs))
    return target
