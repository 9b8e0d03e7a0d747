"""/files: archive files' metadata and their download, with HTTP Range (RFC 9110 §14).

A file's path comes from the database, but it names something a crawler wrote: it is
opened only inside the data dir, never through a symbolic link, and only if it is a
regular file; its size is what the open file has now, not what the row says.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from django.http import StreamingHttpResponse
from ninja import Router

from archiver import conf
from crawls import provenance, retention, storage, wacz_auth
from crawls.api.auth import need, scope_org_id
from crawls.api.errors import ERRORS, ApiError, not_found
from crawls.api.routes_crawls import CrawlId, file_out, find_crawl
from crawls.api.schemas import FileOut, RowId, VerifyOut
from crawls.models import CrawlFile
from crawls.ranges import RANGE, byte_number

router = Router(tags=["files"])
CHUNK = 256 * 1024
CONTENT_TYPES = {".wacz": "application/wacz", ".warc": "application/warc", ".gz": "application/gzip"}


class Unsatisfiable(Exception):
    """The Range header names no byte of the file (416)."""


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The (first, last) byte a Range header asks for, or None for the whole file.

    One range only: a header with several, or one this parser cannot read, is ignored
    and the whole file is sent (RFC 9110 allows a server to ignore Range).
    """
    match = RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.group() == "bytes=-":
        return None
    first, last = match.groups()
    if not first:  # a suffix: the last N bytes
        if byte_number(last) == 0 or size == 0:
            raise Unsatisfiable
        return max(size - byte_number(last), 0), size - 1
    start, end = byte_number(first), byte_number(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        raise Unsatisfiable
    return start, min(end, size - 1)


def content_type(path: str) -> str:
    name = path.lower()
    if name.endswith((".warc.gz", ".warc")):
        return "application/warc"
    return CONTENT_TYPES.get(os.path.splitext(name)[1], "application/octet-stream")


def open_archive(crawl_file: CrawlFile) -> int:
    """A file descriptor of the archive on disk; 404 if it is missing or not safe to open."""
    try:
        path = retention.kept_path(conf.get().data_dir, crawl_file.path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (retention.UnsafePath, OSError):
        raise not_found(f"file {crawl_file.pk} ({crawl_file.path}) is not on disk") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise not_found(f"file {crawl_file.pk} ({crawl_file.path}) is not a regular file")
    return fd


def read_span(fd: int, start: int, length: int) -> Iterator[bytes]:
    """`length` bytes from `start`, in chunks; closes the file when done or abandoned."""
    with os.fdopen(fd, "rb") as handle:
        handle.seek(start)
        while length > 0:
            chunk = handle.read(min(CHUNK, length))
            if not chunk:  # the file shrank under us: end here rather than send garbage
                return
            length -= len(chunk)
            yield chunk


def visible_file(request, file_id: RowId) -> CrawlFile:
    files = CrawlFile.objects.select_related("crawl")
    org_id = scope_org_id(request)
    if org_id is not None:
        files = files.filter(crawl__org_id=org_id)
    crawl_file = files.filter(pk=file_id).first()
    if crawl_file is None:
        raise not_found(f"no file {file_id}")
    return crawl_file


@router.get("/crawls/{crawl_id}/files", response={200: list[FileOut], **ERRORS}, tags=["crawls"],
            summary="A crawl's archive files")
def list_files(request, crawl_id: CrawlId):
    need(request, "crawls.view_crawl")
    crawl = find_crawl(request, crawl_id)
    return [file_out(f) for f in crawl.files.order_by("created_at")]


@router.get("/files/{int:file_id}", response={200: FileOut, **ERRORS}, summary="An archive file's metadata")
def get_file(request, file_id: RowId):
    need(request, "crawls.view_crawl")
    return file_out(visible_file(request, file_id))


@router.post("/files/{int:file_id}/verify", response={200: VerifyOut, **ERRORS},
             summary="Verify an archive file: every file's sha256 against its datapackage.json, the digest, "
                     "the signature (the result is kept on the file)")
def verify_file(request, file_id: RowId):
    need(request, "crawls.view_crawl")
    crawl_file = visible_file(request, file_id)
    settings = conf.get()
    return provenance.verify_file(crawl_file, settings).summary(wacz_auth.known_keys(settings.data_dir))


BINARY = {"schema": {"type": "string", "format": "binary"}}
DOWNLOAD_RESPONSES = {
    status: {"description": text, "content": {kind: BINARY for kind in (
        "application/wacz", "application/warc", "application/gzip", "application/octet-stream")}}
    for status, text in (("200", "The whole file"), ("206", "The bytes a Range header asked for"))
}
ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
DOWNLOAD_RESPONSES["416"] = {"description": "The Range names no byte of the file", "content": ERROR_BODY}
DOWNLOAD_RESPONSES["503"] = {"description": "The object storage holding the file does not answer",
                             "content": ERROR_BODY}


@router.get("/files/{int:file_id}/download", response={**ERRORS},
            summary="Download an archive file (Range requests answered with 206)",
            openapi_extra={"responses": DOWNLOAD_RESPONSES})
def download(request, file_id: RowId):
    need(request, "crawls.view_crawl")
    crawl_file = visible_file(request, file_id)
    if storage.is_object(crawl_file):
        return download_object(request, crawl_file)
    fd = open_archive(crawl_file)
    size = os.fstat(fd).st_size
    try:
        span = byte_range(request.headers.get("Range"), size)
    except Unsatisfiable:
        os.close(fd)
        raise ApiError(416, f"file {crawl_file.pk} has {size} bytes; the range "
                       f"{request.headers.get('Range')!r} names none of them",
                       headers={"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"}) from None
    start, end = span or (0, size - 1)
    response = StreamingHttpResponse(read_span(fd, start, end - start + 1),
                                     status=206 if span else 200,
                                     content_type=content_type(crawl_file.path))
    return with_headers(response, crawl_file, span, size)


def with_headers(response, crawl_file: CrawlFile, span, size: int):
    start, end = span or (0, size - 1)
    response["Content-Length"] = str(end - start + 1)
    response["Accept-Ranges"] = "bytes"
    name = "".join(c for c in os.path.basename(crawl_file.path) if c.isprintable() and c not in '"\\')
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    if span:
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
    return response


def download_object(request, crawl_file: CrawlFile):
    """An archive in the bucket, streamed from it with the same Range (crawls/downloads.py
    says why it is streamed rather than redirected to a presigned URL)."""
    store = storage.object_store(conf.get())
    if store is None or store.target.root != crawl_file.root:
        raise not_found(f"file {crawl_file.pk} is in a bucket ARCHIVER_STORAGE_URL does not name")
    try:
        size = store.head(crawl_file.path)
        if size is None:
            raise not_found(f"file {crawl_file.pk} ({crawl_file.path}) is not in its bucket")
        try:
            span = byte_range(request.headers.get("Range"), size)
        except Unsatisfiable:
            raise ApiError(416, f"file {crawl_file.pk} has {size} bytes; the range "
                           f"{request.headers.get('Range')!r} names none of them",
                           headers={"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"}) from None
        start, end = span or (0, size - 1)
        body = store.read(crawl_file.path, start, end) if size else iter(())
    except storage.StorageError as exc:
        raise ApiError(503, str(exc)) from None
    response = StreamingHttpResponse(body, status=206 if span else 200,
                                     content_type=content_type(crawl_file.path))
    return with_headers(response, crawl_file, span, size)


