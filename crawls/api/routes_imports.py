"""POST /imports: one archive made elsewhere (WARC, WARC.gz, WACZ, multi-WACZ) as the request
body, streamed to the data dir within the org's storage quota and ARCHIVER_ARCHIVE_MAX_BYTES,
then taken in as `archiver import` takes it (runner/intake.py): all of it or nothing.

The body is exempt from the API's 2.5 MB cap (archiver/body_limit.py) and bounded here
instead, before a byte is read, by its Content-Length, which it must have; it is never held
in memory, and the file it is written to is removed whatever happens."""

from __future__ import annotations

import os
import secrets

from django.utils import timezone
from ninja import Query, Router, Schema

from archiver import conf
from crawls.api.auth import default_org_slug, need, visible_orgs
from crawls.api.errors import ERRORS, ApiError, invalid, not_found
from crawls.api.routes_crawls import file_out, shown
from crawls.api.schemas import CrawlOut, FileOut
from crawls.config import human_size

PATH = "/api/v1/imports"  # archiver/body_limit.py lets this path's bodies through
CHUNK = 1 << 20

router = Router(tags=["imports"])


class ImportOut(Schema):
    crawl: CrawlOut
    pages: int
    files: list[FileOut]


@router.post(
    "/imports", response={201: ImportOut, **ERRORS},
    summary="Import an archive made elsewhere (the body: a WARC, WARC.gz, WACZ or multi-WACZ)",
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
def import_archive(request, org: str | None = Query(None, max_length=100)):
    """The archive becomes a crawl of origin `import`, as `archiver import FILE` makes it."""
    from runner import intake  # the runner's file guards; loaded only when an import comes

    need(request, "crawls.add_crawl")
    slug = org or default_org_slug(request)
    owner = visible_orgs(request).filter(slug=slug).first()
    if owner is None:
        raise not_found(f"no org {slug!r}")
    settings = conf.get()
    size = upload_size(request, owner, settings.archive_max_bytes)
    folder = settings.data_dir / intake.IMPORTS
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"upload-{secrets.token_hex(8)}"
    try:
        receive(request, path, size)
        imported = intake.import_archives(settings, owner, [path], timezone.now())
    except intake.ImportRefused as exc:
        raise invalid(str(exc).replace(str(path), "the upload")) from None
    finally:
        path.unlink(missing_ok=True)
    return 201, {"crawl": shown(imported.crawl), "pages": imported.pages,
                 "files": [file_out(row) for row in imported.files]}


def upload_size(request, owner, most: int) -> int:
    """The body's announced size, refused (413) past the cap or the org's room."""
    value = request.META.get("CONTENT_LENGTH") or ""
    if not value.isdigit() or int(value) == 0:
        raise invalid("send the archive as the body, with its Content-Length")
    size = int(value)
    if size > most:
        raise ApiError(413, f"the archive is {human_size(size)}, over the {human_size(most)} "
                            "an archive may have (ARCHIVER_ARCHIVE_MAX_BYTES)", code="too_large")
    if owner.storage_quota_reached(size):
        raise ApiError(413, f"org '{owner.slug}' storage quota: {human_size(owner.bytes_stored)} "
                            f"of {human_size(owner.storage_quota_bytes)} used, and the archive "
                            f"is {human_size(size)}", code="too_large")
    return size


def receive(request, path, size: int) -> None:
    """The body written to `path` (a new file, 0600), a chunk at a time, exactly `size` bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        left = size
        while left:
            chunk = request.read(min(CHUNK, left))
            if not chunk:
                raise invalid(f"the body ended after {size - left} of its {size} bytes")
            out.write(chunk)
            left -= len(chunk)
