"""Serving a crawl's archive files, with HTTP Range requests: as downloads to the admin
and its API, and to ReplayWeb.page on the replay origin (crawls/replay_views.py).

An archive in object storage is streamed through this view (GetObject with the same Range),
not redirected to a presigned URL: the admin's login and permissions (or, on the replay
origin, a capability the admin minted after checking them) then guard every byte,
the bucket stays private and needs no CORS rule for ReplayWeb.page's service worker, and the
browser never needs to reach the storage endpoint (often an address only the hosts see).

ReplayWeb.page reads a WACZ in pieces (its index first, then the records a page needs),
so a download answers `Range: bytes=...` with 206 and Content-Range. The file is opened
through retention's guard (inside the data dir, not a symbolic link) and with O_NOFOLLOW,
and must be a regular file: a path in the database is never trusted to point anywhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse

from archiver import conf
from crawls import storage
from crawls.ranges import RANGE, byte_number
from crawls.retention import UnsafePath, kept_path

CHUNK = 256 * 1024
WACZ_TYPE = "application/wacz"


def file_name(crawl_file) -> str:
    """The name a download of the file gets: its own, ending in .wacz."""
    name = crawl_file.path.rsplit("/", 1)[-1]
    return name if name.endswith(".wacz") else f"{name}.wacz"


def package_name(crawl_id: str, name: str) -> str:
    """A kept archive's name in a multi-WACZ package, and in the `relation.requires` of the
    archives deduplicated against it. ReplayWeb.page keys a package's WACZs by name, and
    finds a revisit's payload in the WACZs its archive requires by that name: the two must
    agree, and two crawls may name theirs alike. What the runner keeps is named after its
    crawl already; any other name gets the crawl id in front."""
    name = name if name.endswith(".wacz") else f"{name}.wacz"
    return name if name.startswith(f"{crawl_id}-") else f"{crawl_id}-{name}"


def open_archive(data_dir: Path, relative: str):
    """The file as an open binary handle and its size; Http404 if it is gone or unsafe."""
    try:
        path = kept_path(data_dir, relative)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (UnsafePath, OSError):
        raise Http404("this archive file is not on disk") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Http404("this archive file is not a regular file")
    return os.fdopen(fd, "rb"), info.st_size


def byte_range(header: str, size: int) -> tuple[int, int] | None | str:
    """(first, last) for one satisfiable range; None to send it all; "unsatisfiable"."""
    match = RANGE.fullmatch(header.strip())
    if not match or (not match.group(1) and not match.group(2)):
        return None  # several ranges, or not bytes: the whole file is a valid answer
    first, last = match.groups()
    if not first:  # the last N bytes
        length = byte_number(last)
        if length == 0:
            return "unsatisfiable"
        return max(size - length, 0), size - 1
    first = byte_number(first)
    last = min(byte_number(last), size - 1) if last else size - 1
    if first >= size or last < first:
        return "unsatisfiable"
    return first, last


def range_asked(request, size: int) -> tuple[int, int] | None | str:
    """The one range the request asks of `size` bytes (byte_range); None without a Range."""
    return byte_range(request.headers.get("Range", ""), size) if "Range" in request.headers else None


def unsatisfiable(size: int) -> HttpResponse:
    """416, with the size the range missed."""
    response = HttpResponse(status=416)
    response["Content-Range"] = f"bytes */{size}"
    return never_rendered(response)


def ranged_response(body, wanted: tuple[int, int] | None, size: int, content_type: str) -> StreamingHttpResponse:
    """`body` streamed: the range `wanted` of `size` bytes (206), or all of them (200)."""
    first, last = wanted or (0, size - 1)
    response = StreamingHttpResponse(body, status=206 if wanted else 200, content_type=content_type)
    response["Content-Length"] = str(last - first + 1)
    if wanted:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    return response


def read_span(handle, first: int, last: int):
    with handle:
        handle.seek(first)
        left = last - first + 1
        while left > 0:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


def never_rendered(response: HttpResponse) -> HttpResponse:
    """An archive's answer is bytes to save or to read by fetch(), never a document: a
    browser that is sent to it shows no archived script on this origin (nosniff comes from
    SecurityMiddleware; the sandbox gives anything rendered an origin of its own)."""
    response["Accept-Ranges"] = "bytes"
    response["Cache-Control"] = "private, no-store"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    return response


def serve_archive(request, data_dir: Path, relative: str, filename: str) -> HttpResponse:
    handle, size = open_archive(data_dir, relative)
    wanted = range_asked(request, size)
    if wanted == "unsatisfiable":
        handle.close()
        return unsatisfiable(size)
    if wanted is None:
        response = FileResponse(handle, content_type=WACZ_TYPE, as_attachment=True, filename=filename)
        response["Content-Length"] = str(size)
    else:
        response = ranged_response(read_span(handle, *wanted), wanted, size, WACZ_TYPE)
    return never_rendered(response)


def serve_object(request, crawl_file, filename: str) -> HttpResponse:
    """An archive kept in the bucket, streamed with Range (HEAD for its size, then GetObject
    with the range asked for). 404 if it is gone, 503 if the store does not answer."""
    store = storage.object_store(conf.get())
    if store is None or store.target.root != crawl_file.root:
        raise Http404("this archive is in a bucket ARCHIVER_STORAGE_URL does not name")
    try:
        size = store.head(crawl_file.path)
        if size is None:
            raise Http404("this archive is not in its bucket")
        wanted = range_asked(request, size)
        if wanted == "unsatisfiable":
            return unsatisfiable(size)
        first, last = wanted or (0, size - 1)
        body = store.read(crawl_file.path, first, last) if size else iter(())
    except storage.StorageError as exc:
        return HttpResponse(f"{exc}\n", status=503, content_type="text/plain")
    response = ranged_response(body, wanted, size, WACZ_TYPE)
    if not wanted:
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return never_rendered(response)
