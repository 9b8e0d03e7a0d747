"""WACZ files for the search tests: made from pages as the real crawler lists them with
`--text to-pages`, or taken from a crawl by archiver's own crawler, kept under a data dir
with their CrawlFile row as the runner keeps them."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

from crawls.models import Crawl, CrawlFile

HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages", "hasText": True}


def real_crawler_page(url: str, title: str, text: str, ts: str = "2026-12-01T10:00:00.000Z") -> dict:
    """A pages.jsonl entry in browsertrix-crawler 1.x's shape with --text to-pages."""
    return {"id": hashlib.md5(url.encode()).hexdigest(), "url": url, "title": title, "ts": ts,
            "loadState": 4, "mime": "text/html", "status": 200, "seed": False, "depth": 1,
            "favIconUrl": "", "text": text}


def write_wacz(path: Path, pages: list[dict]) -> Path:
    lines = "\n".join(json.dumps(p) for p in [HEADER, *pages]) + "\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pages/pages.jsonl", lines)
        zf.writestr("datapackage.json", json.dumps({"profile": "data-package", "resources": []}))
    return path


def keep(data_dir: Path, crawl: Crawl, source: Path, name: str = "") -> CrawlFile:
    """`source` kept as archives/<crawl>/<name> with its row, as runner/keep.py keeps it."""
    name = name or f"{crawl.pk}-0-{CrawlFile.objects.count() + 1}.wacz"
    target = data_dir / "archives" / crawl.pk / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    data = target.read_bytes()
    return CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.pk}/{name}",
                                    size=len(data), sha256=hashlib.sha256(data).hexdigest())


def keep_pages(data_dir: Path, crawl: Crawl, pages: list[dict], tmp: Path) -> CrawlFile:
    tmp.mkdir(parents=True, exist_ok=True)
    return keep(data_dir, crawl, write_wacz(tmp / f"w{CrawlFile.objects.count()}.wacz", pages))
