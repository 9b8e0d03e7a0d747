"""A collection's files as one: its multi-WACZ download (crawls/multiwacz.py) and the
resources of its replay.json, for the admin, the API and the replay origin alike."""

from __future__ import annotations

import zlib

from django.http import Http404, HttpResponse

from archiver import __version__, conf
from crawls import excerpts, storage, wacz_auth
from crawls.downloads import (
    file_name,
    never_rendered,
    open_archive,
    package_name,
    range_asked,
    ranged_response,
    read_span,
    unsatisfiable,
)
from crawls.excerpts import Excerpt
from crawls.models import Collection, CrawlFile
from crawls.multiwacz import Member, Package, datapackage, in_memory

ZIP_TYPE = "application/zip"


def reader(crawl_file: CrawlFile | Excerpt):
    """read(first, last) of a kept file or an excerpt, opened anew for each span (on disk or
    in its bucket)."""
    settings = conf.get()
    if isinstance(crawl_file, Excerpt):
        return lambda first, last: read_span(open_archive(settings.data_dir, crawl_file.location)[0], first, last)
    if storage.is_object(crawl_file):
        store = storage.object_store(settings)
        if store is None or store.target.root != crawl_file.root:
            raise Http404("an archive of this collection is in a bucket ARCHIVER_STORAGE_URL does not name")
        return lambda first, last: store.read(crawl_file.path, first, last)

    def read(first: int, last: int):
        handle, size = open_archive(settings.data_dir, crawl_file.path)
        if size != crawl_file.size:  # the layout was computed from the recorded size
            handle.close()
            raise Http404(f"archive {crawl_file.path} is not the size archiver recorded")
        yield from read_span(handle, first, last)
    return read


def crc32_of(crawl_file: CrawlFile) -> int:
    """The file's CRC-32, read through once the first time and kept on its row."""
    if crawl_file.crc32 is None:
        value = 0
        for chunk in reader(crawl_file)(0, crawl_file.size - 1) if crawl_file.size else ():
            value = zlib.crc32(chunk, value)
        crawl_file.remember_crc32(value)
    return crawl_file.crc32


def member_name(crawl_file: CrawlFile) -> str:
    # Two crawls may name a WACZ alike: each member sits in its crawl's folder.
    return f"{crawl_file.crawl_id}/{file_name(crawl_file)}"


def package(collection: Collection) -> Package:
    # With excerpts of the archives outside it that its members require, so that their
    # revisits replay offline too, and nothing else of those archives (crawls/excerpts.py).
    files = excerpts.collection_archives(collection)
    if not files:
        raise Http404(f"collection {collection.name!r} has no archive files")
    resources = [{"name": package_name(f.crawl_id, file_name(f)), "path": member_name(f), "hash": f"sha256:{f.sha256}",
                  "bytes": f.size, "crawlId": f.crawl_id} for f in files]
    package_bytes = datapackage(resources, collection.name, collection.created_at)
    # Signed as every archive archiver makes; the created time is the package's, so the
    # signature (deterministic) and the download's bytes stay the same from one request to
    # the next.
    digest = wacz_auth.package_digest(package_bytes, collection.created_at.isoformat(), conf.get().data_dir,
                                      f"archiver {__version__}")
    members = [in_memory("datapackage.json", package_bytes, collection.created_at),
               in_memory("datapackage-digest.json", digest, collection.created_at)]
    members += [Member(member_name(f), f.size, crc32_of(f), f.created_at, reader(f)) for f in files]
    return Package(members)


def serve_package(request, collection: Collection) -> HttpResponse:
    """The whole package, or the one range asked for (206), as an attachment."""
    zipped = package(collection)
    size = zipped.size
    wanted = range_asked(request, size)
    if wanted == "unsatisfiable":
        return unsatisfiable(size)
    response = ranged_response(zipped.read(*(wanted or (0, size - 1))), wanted, size, ZIP_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{collection.slug}.zip"'
    return never_rendered(response)
