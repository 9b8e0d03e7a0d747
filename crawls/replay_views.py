"""The replay origin's views: ReplayWeb.page and a crawl's archives, to a capability.

This is a separate WSGI application (archiver/replay_wsgi.py, URLconf archiver/replay_urls.py)
on a host name of its own (ARCHIVER_REPLAY_URL): archived pages run their scripts here, so
here there is no session, no log-in and no admin, only what the capability in the path
grants (crawls/capability.py): one crawl's archives, read-only, for an hour.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from django.conf import settings
from django.http import FileResponse, Http404, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.views.decorators.http import require_safe

from archiver import conf
from crawls import capability, dedup, storage
from crawls.downloads import file_name, serve_archive, serve_object
from crawls.models import Crawl, CrawlFile

# ReplayWeb.page's files (scripts/replay-files.sh): its frame's placeholder, UI and worker.
ASSETS = {"": ("index.html", "text/html; charset=utf-8"),
          "ui.js": ("ui.js", "text/javascript; charset=utf-8"),
          "sw.js": ("sw.js", "text/javascript; charset=utf-8")}
# archiver's own: starts the player once its worker is active (crawls/static/crawls/).
OWN_ASSETS = {"start.js": (Path(__file__).parent / "static" / "crawls" / "replay-start.js",
                           "text/javascript; charset=utf-8")}


def granted(view):
    """A view of the crawl the capability in the path grants: 403 saying why when it grants
    nothing (expired, forged, for another crawl), 404 once the crawl is gone. Read-only."""
    @require_safe
    @functools.wraps(view)
    def checked(request, token: str, **kwargs):
        try:
            crawl_id = capability.crawl_of(token, time.time())
        except capability.Refused as exc:
            return HttpResponseForbidden(f"{exc}\n", content_type="text/plain; charset=utf-8")
        return view(request, token, get_object_or_404(Crawl, pk=crawl_id), **kwargs)
    return checked


def base(token: str) -> str:
    return f"{conf.get().replay_url}/c/{token}/"


def file_url(token: str, crawl_file: CrawlFile) -> str:
    return f"{base(token)}files/{crawl_file.pk}/{file_name(crawl_file)}"


@granted
def page(request, token: str, crawl: Crawl):
    """ReplayWeb.page for one crawl (what the admin's Replay page frames)."""
    files = replay_files(crawl)
    if not files:
        raise Http404("this crawl has no archive files yet")
    source = file_url(token, files[0]) if len(files) == 1 else f"{base(token)}replay.json"
    context = {"source": source, "url": request.GET.get("url") or (crawl.seeds[0] if crawl.seeds else ""),
               "ts": request.GET.get("ts", "")}
    return TemplateResponse(request, "replay/page.html", context)


@granted
def package(request, token: str, crawl: Crawl):
    """Every WACZ of the crawl, and those its revisit records point into, as one multi-WACZ
    package for ReplayWeb.page."""
    return JsonResponse(dedup.replay_resources(replay_files(crawl), lambda f: file_url(token, f)),
                        headers={"Cache-Control": "no-store"})


def replay_files(crawl: Crawl) -> list[CrawlFile]:
    """The crawl's files, then the kept files they require (deduplicated against)."""
    return dedup.with_required(list(crawl.files.order_by("created_at")))


@granted
def archive(request, token: str, crawl: Crawl, file_pk: int, name: str):
    """One WACZ of the crawl, or one it requires (the grant covers those too), with Range."""
    crawl_file = next((f for f in replay_files(crawl) if f.pk == file_pk), None)
    if crawl_file is None:
        raise Http404("no such archive file of this crawl")
    if storage.is_object(crawl_file):
        return serve_object(request, crawl_file, file_name(crawl_file))
    return serve_archive(request, conf.get().data_dir, crawl_file.path, file_name(crawl_file))


def replay_folder() -> Path:
    """Where scripts/replay-files.sh put ReplayWeb.page (a clone's, else the data dir's)."""
    for folder in settings.REPLAY_DIRS:
        if (folder / "ui.js").is_file():
            return folder
    raise Http404("ReplayWeb.page is not installed: run bash scripts/replay-files.sh")


@require_safe
def asset(request, name: str = ""):
    if name not in ASSETS and name not in OWN_ASSETS:
        raise Http404("no such file")
    filename, content_type = ASSETS.get(name) or OWN_ASSETS[name]
    try:
        handle = (OWN_ASSETS[name][0] if name in OWN_ASSETS else replay_folder() / filename).open("rb")
    except OSError:
        raise Http404(f"{filename} of ReplayWeb.page is missing: run bash scripts/replay-files.sh") from None
    response = FileResponse(handle, content_type=content_type)
    response["Cache-Control"] = "no-cache"
    return response
