"""Kept archives verified (crawls/wacz_auth.py) and the result kept on their CrawlFile rows:
when the runner keeps them, and on request (`archiver verify`, the API, the admin)."""

from __future__ import annotations

import datetime as dt
import logging

from django.utils import timezone

from archiver import conf
from crawls import wacz_auth
from crawls.kept_wacz import DiffRefused, open_kept
from crawls.models import Collection, Crawl, CrawlFile

log = logging.getLogger(__name__)


def verify_file(crawl_file: CrawlFile, settings=None, now: dt.datetime | None = None,
                rehash: bool = True) -> wacz_auth.Report:
    """Verify one kept file and record what was found on its row; `rehash`: its bytes
    against the sha256 archiver recorded (not when it was hashed a moment ago, as it was kept)."""
    settings = settings or conf.get()
    name = crawl_file.path.rsplit("/", 1)[-1]
    try:
        with open_kept(crawl_file, settings) as handle:
            if name.endswith(".wacz"):
                report = wacz_auth.verify(handle, name)
            else:
                report = wacz_auth.Report(name)
                report.add("signature", None, "a WARC kept as it is carries no signature")
            if rehash:
                report.add("recorded", *_recorded_hash(handle, crawl_file))
    except DiffRefused as exc:
        report = wacz_auth.Report(name)
        report.add("archive", False, f"cannot be read: {exc}")
    known = wacz_auth.known_keys(settings.data_dir)
    crawl_file.record_verification(report.signer_words(known), report.ok, report.result(), now or timezone.now())
    return report


def _recorded_hash(handle, crawl_file: CrawlFile) -> tuple[bool, str]:
    import hashlib

    handle.seek(0)
    digest = hashlib.sha256()
    while chunk := handle.read(wacz_auth.CHUNK):
        digest.update(chunk)
    if digest.hexdigest() == crawl_file.sha256:
        return True, "the file's sha256 is the one archiver recorded when it was kept"
    return False, "the file was changed since it was kept: its sha256 is not the one archiver recorded"


def verify_kept(crawl_files, settings=None, now=None) -> None:
    """Verification at keeping time: said in the daemon's log, never fatal to the crawl."""
    for crawl_file in crawl_files:
        try:
            report = verify_file(crawl_file, settings, now, rehash=False)
        except Exception:  # a verification bug must not lose the archive's record
            log.exception("verifying %s failed", crawl_file.path)
            continue
        if not report.ok:
            log.warning("crawl %s: %s does not verify: %s", crawl_file.crawl_id, crawl_file.path, report.result())


def crawl_files(crawl: Crawl):
    return list(crawl.files.order_by("created_at", "pk"))


def collection_files(collection: Collection):
    return list(collection.files())


def said(crawl_file: CrawlFile) -> str:
    """Its provenance in words, for the admin and the API: "signed by …, verified at …"."""
    if crawl_file.verified_at is None:
        return "not verified yet"
    when = timezone.localtime(crawl_file.verified_at).strftime("%Y-%m-%d %H:%M:%S %Z")
    if not crawl_file.verify_ok:
        return f"does not verify ({crawl_file.verify_result}), checked at {when}"
    if crawl_file.signer == "not signed":
        return f"not signed; its hashes hold, verified at {when}"
    return f"signed by {crawl_file.signer}, verified at {when}"
