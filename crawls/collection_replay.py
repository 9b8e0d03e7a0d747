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

from django.db.models import Case, Q, When
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
from crawls import capability, excerpts, replay_views, storage, wayback
from crawls.downloads import file_name, package_name, serve_archive, serve_object
from crawls.models import Collection
from crawls.models.collections import LINK_PREFIX

INITIAL_PAGES = 100  # pages replay.json lists up front (ReplayWeb.page's page list)
PAGE_SIZE, MAX_PAGE_SIZE = 25, 1000  # pages query: its default page size (ReplayWeb.page's), and cap


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
    # `filename` names the member archive as replay.json does: ReplayWeb.page loads a page
    # from the resource of that name (with pagesQueryUrl it reads no page list of its own).
    return {"id": str(snapshot.pk), "url": snapshot.url, "title": snapshot.title or snapshot.url,
            "ts": snapshot.captured_at.isoformat(), "status": snapshot.http_status,
            "mime": snapshot.mime, "depth": snapshot.depth, "isSeed": snapshot.seed,
            "crawl_id": snapshot.crawl_id, "filename": package_name(snapshot.crawl_id, snapshot.filename)}


def collection_pages(collection: Collection):
    return wayback.Snapshot.objects.filter(crawl__collections=collection, captured_at__isnull=False,
                                           status=wayback.SnapshotStatus.DONE).exclude(filename="")


@collection_granted
def replay_json(request, token: str, collection: Collection):
    """Every member archive for ReplayWeb.page to load as one (its multi-WACZ json source)."""
    # ReplayWeb.page keys a package's WACZs by name, and two crawls may name theirs alike.
    resources = [{"name": package_name(f.crawl_id, file_name(f)), "path": replay_views.file_url(token, f),
                  "hash": f"sha256:{f.sha256}", "size": f.size, "crawlId": f.crawl_id}
                 for f in replay_files(collection)]
    pages = collection_pages(collection)
    initial = [page_entry(s) for s in pages.order_by("crawl_id", "pk")[:INITIAL_PAGES]]
    # Without the profile ReplayWeb.page reads the json as one WACZ's datapackage: only the
    # first resource would replay. With pagesQueryUrl it asks the server which archive holds
    # a page instead of reading every member's page list first.
    return JsonResponse({"profile": "multi-wacz-package", "resources": resources, "initialPages": initial,
                         "totalPages": pages.count(), "pagesQueryUrl": f"{replay_views.base(token)}pages"},
                        headers={"Cache-Control": "no-store"})


@collection_granted
def pages(request, token: str, collection: Collection):
    """replay.json's pagesQueryUrl, answered as Browsertrix's collection pages query is:
    `?url=` the pages of exactly that address, `?search=` those whose address or title holds
    the text (addresses starting with it first), `page` (from 1) and `pageSize`; the answer is
    `{items, total, page, pageSize}` with the items as in initialPages. Only this collection's."""
    try:
        number = int(request.GET.get("page", "1"))
        size = int(request.GET.get("pageSize", str(PAGE_SIZE)))
    except ValueError:
        return HttpResponseBadRequest("page and pageSize are numbers\n", content_type="text/plain; charset=utf-8")
    if number < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        return HttpResponseBadRequest(f"page is 1 or more, pageSize 1 to {MAX_PAGE_SIZE}\n",
                                      content_type="text/plain; charset=utf-8")
    rows = collection_pages(collection)
    if url := request.GET.get("url"):
        rows = rows.filter(url=url)
    order = ["url", "captured_at", "pk"]
    if text := request.GET.get("search"):
        rows = rows.filter(Q(url__icontains=text) | Q(title__icontains=text)).annotate(
            starts=Case(When(url__startswith=text, then=0), default=1))
        order.insert(0, "starts")
    items = [page_entry(s) for s in rows.order_by(*order)[(number - 1) * size:number * size]]
    return JsonResponse({"items": items, "total": rows.count(), "page": number, "pageSize": size},
                        headers={"Cache-Control": "no-store"})


def replay_files(collection: Collection) -> list:
    """Its members' archives, then an excerpt of each archive outside it they require: a
    member deduplicated against a crawl outside the collection replays its unchanged pages
    from the records it names, never from that crawl's whole archive (crawls/excerpts.py)."""
    return excerpts.collection_archives(collection)


@collection_granted
def archive(request, token: str, collection: Collection, file_pk: int, name: str):
    crawl_file = next((f for f in replay_files(collection) if f.pk == file_pk), None)
    if crawl_file is None:
        raise Http404("no such archive file of this collection")
    if isinstance(crawl_file, excerpts.Excerpt):
        return serve_archive(request, conf.get().data_dir, crawl_file.location, file_name(crawl_file))
    if storage.is_object(crawl_file):
        return serve_object(request, crawl_file, file_name(crawl_file))
    return serve_archive(request, conf.get().data_dir, crawl_file.path, file_name(crawl_file))


@collection_granted
def web(request, token: str, collection: Collection, stamp: str, url: str):
    """`/c/<token>/web/<timestamp>/<url>` opens the collection's replay at the nearest capture;
    `/c/<token>/web/*/<url>` lists every capture."""
    url = wayback.normal_url(url, request.META.get("QUERY_STRING", ""))
    crawls = collection.crawls.all()
    return web_answer(request, crawls, stamp, url, open_capture=lambda snapshot: HttpResponseRedirect(
        f"{replay_views.base(token)}?" + urlencode({"url": snapshot.url, "ts": wayback.timestamp(snapshot.captured_at)})),
        web_url=lambda stamp_, url_: f"{replay_views.base(token)}web/{stamp_}/{url_}",
        render=lambda name, context, status: TemplateResponse(request, f"replay/web_{name}.html", context,
                                                              status=status))


def web_answer(request, crawls, stamp: str, url: str, *, open_capture, web_url, render):
    """What the admin's /web/ and a collection's share: the capture list, or the nearest one.
    `render(name, context, status)` draws the origin's own page, `captures` or `message`."""
    def message(title: str, text: str, status: int):
        return render("message", {"title": title, "message": text, "url": url}, status)

    if stamp == "*":
        found = list(wayback.captures(crawls, url)[:wayback.MAX_LISTED])
        if not found:
            return message("Not archived", f"{url} was not archived here", 404)
        rows = [{"when": s.captured_at, "url": s.url, "title": s.title, "status": s.http_status,
                 "crawl": s.crawl.short_id, "crawl_id": s.crawl_id,
                 "link": web_url(wayback.timestamp(s.captured_at), s.url)} for s in found]
        return render("captures", {"title": f"Captures of {url}", "url": url, "rows": rows}, 200)
    try:
        when = wayback.parse_timestamp(stamp)
    except ValueError as exc:
        return message("Not a timestamp", str(exc), 400)
    snapshot = wayback.nearest(crawls, url, when)
    if snapshot is None:
        return message("Not archived", f"{url} was not archived here", 404)
    return open_capture(snapshot)
