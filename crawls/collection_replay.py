"""The replay origin's views of a collection: ReplayWeb.page over all its members, its
replay.json (Browsertrix's shape), its archives with Range, and `/web/` inside it.

They answer under `/c/<token>/`, as one crawl's replay does (crawls/replay_views.py), to two
kinds of token: a collection capability the admin mints for a staff user (an hour), or the
collection's public link (`pub_...`, until revoked; only its hash is stored). Either reaches
that collection's replay and archives and nothing else; a revoked or unknown link is a 404.
"""

from __future__ import annotations

import functools
import time
from urllib.parse import urlencode

from django.http import (
    Http404,
    HttpResponseBadRequest,
    HttpResponseForbidden,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.views.decorators.http import require_safe

from archiver import conf
from crawls import capability, replay_views, storage, wayback
from crawls.downloads import file_name, serve_archive, serve_object
from crawls.models import Collection
from crawls.models.collections import LINK_PREFIX

INITIAL_PAGES = 100  # pages replay.json lists up front (ReplayWeb.page's page list)


def for_collection(token: str) -> bool:
    return token.startswith((LINK_PREFIX, capability.COLLECTION))


def collection_granted(view):
    """A view of the collection the token opens: 404 for an unknown or revoked public link,
    403 for a capability that grants nothing, 404 once the collection is gone."""
    @require_safe
    @functools.wraps(view)
    def checked(request, token: str, **kwargs):
        if token.startswith(LINK_PREFIX):
            collection = Collection.by_link(token)
            if collection is None:
                raise Http404("no collection has this link (it may have been revoked)")
        else:
            try:
                pk = capability.collection_of(token, time.time())
            except capability.Refused as exc:
                return HttpResponseForbidden(f"{exc}\n", content_type="text/plain; charset=utf-8")
            collection = get_object_or_404(Collection, pk=pk)
        return view(request, token, collection, **kwargs)
    return checked


def either(crawl_view, collection_view):
    """One route under /c/<token>/ for both: a crawl's capability, or a collection's token."""
    def route(request, token: str, **kwargs):
        return (collection_view if for_collection(token) else crawl_view)(request, token, **kwargs)
    return route


@collection_granted
def page(request, token: str, collection: Collection):
    first = collection.files().first()
    if first is None:
        raise Http404(f"collection {collection.name!r} has no archive files yet")
    context = {"source": f"{replay_views.base(token)}replay.json", "url": request.GET.get("url", ""),
               "ts": request.GET.get("ts", "")}
    if not context["url"]:
        seeds = first.crawl.seeds
        context["url"] = seeds[0] if seeds else ""
    return TemplateResponse(request, "replay/page.html", context)


def page_entry(snapshot) -> dict:
    return {"id": str(snapshot.pk), "url": snapshot.url, "title": snapshot.title or snapshot.url,
            "ts": snapshot.captured_at.isoformat(), "status": snapshot.http_status,
            "crawl_id": snapshot.crawl_id, "filename": snapshot.filename}


@collection_granted
def replay_json(request, token: str, collection: Collection):
    """Every member archive for ReplayWeb.page to load as one (its multi-WACZ json source)."""
    # ReplayWeb.page keys a package's WACZs by name, and two crawls may name theirs alike.
    resources = [{"name": f"{f.crawl_id}-{file_name(f)}", "path": replay_views.file_url(token, f), "hash": f"sha256:{f.sha256}",
                  "size": f.size, "crawlId": f.crawl_id} for f in collection.files()]
    pages = wayback.Snapshot.objects.filter(crawl__collections=collection, captured_at__isnull=False,
                                            status=wayback.SnapshotStatus.DONE)
    initial = [page_entry(s) for s in pages.order_by("crawl_id", "pk")[:INITIAL_PAGES]]
    # Without the profile ReplayWeb.page reads the json as one WACZ's datapackage: only the
    # first resource would replay.
    return JsonResponse({"profile": "multi-wacz-package", "resources": resources, "initialPages": initial},
                        headers={"Cache-Control": "no-store"})


@collection_granted
def archive(request, token: str, collection: Collection, file_pk: int, name: str):
    crawl_file = get_object_or_404(collection.files(), pk=file_pk)
    if storage.is_object(crawl_file):
        return serve_object(request, crawl_file, file_name(crawl_file))
    return serve_archive(request, conf.get().data_dir, crawl_file.path, file_name(crawl_file))


@collection_granted
def web(request, token: str, collection: Collection, stamp: str, url: str):
    """`/c/<token>/web/<timestamp>/<url>` opens the collection's replay at the nearest capture;
    `/c/<token>/web/*/<url>` lists every capture."""
    url = wayback.normal_url(url, request.META.get("QUERY_STRING", ""))
    crawls = collection.crawls.all()
    return web_answer(request, crawls, stamp, url, lambda snapshot: HttpResponseRedirect(
        f"{replay_views.base(token)}?" + urlencode({"url": snapshot.url, "ts": wayback.timestamp(snapshot.captured_at)})),
        lambda stamp_, url_: f"{replay_views.base(token)}web/{stamp_}/{url_}")


def web_answer(request, crawls, stamp: str, url: str, open_capture, web_url):
    """What the admin's /web/ and a collection's share: the capture list, or the nearest one."""
    if stamp == "*":
        found = list(wayback.captures(crawls, url)[:wayback.MAX_LISTED])
        if not found:
            raise Http404(f"{url} was not archived here")
        rows = [{"when": s.captured_at, "url": s.url, "title": s.title, "status": s.http_status,
                 "crawl": s.crawl.short_id, "link": web_url(wayback.timestamp(s.captured_at), s.url)}
                for s in found]
        return TemplateResponse(request, "replay/captures.html", {"url": url, "rows": rows})
    try:
        when = wayback.parse_timestamp(stamp)
    except ValueError as exc:
        return HttpResponseBadRequest(f"{exc}\n", content_type="text/plain; charset=utf-8")
    snapshot = wayback.nearest(crawls, url, when)
    if snapshot is None:
        raise Http404(f"{url} was not archived here")
    return open_capture(snapshot)
