"""The admin's search page, /admin/search/?q= (URL name admin:archiver_search): the archived
pages matching a query, one result per URL listing its captures, each with a link that opens
its crawl's replay at that page and time (crawls/search_groups.py)."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from crawls import search, search_groups, wayback

PER_PAGE = 20
MAX_PAGE = 50


def search_page(request):
    if not request.user.has_perm("crawls.view_crawl"):
        raise PermissionDenied
    query = request.GET.get("q", "").strip()
    page = _page_number(request.GET.get("page"))
    hits, results, error = [], [], ""
    if query:
        try:
            hits = search.search(query, limit=PER_PAGE + 1, offset=(page - 1) * PER_PAGE)
            results = search_groups.grouped(hits[:PER_PAGE], query)
        except search.QueryError as exc:
            error = str(exc)
    context = {
        **admin.site.each_context(request), "title": "Search archived pages", "query": query,
        "error": error, "page": page, "more": len(hits) > PER_PAGE,
        "results": [_row(result) for result in results],
    }
    # A refused query is the client's: a 400 with the reason on the page, never a 500.
    return TemplateResponse(request, "admin/crawls/search.html", context, status=400 if error else 200)


def _page_number(value: str | None) -> int:
    return int(value) if value and value.isdigit() and 1 <= int(value) <= MAX_PAGE else 1


def _row(result: search_groups.Result) -> dict:
    return {
        "hit": result.best,
        # Escaped by snippet_html(): only <mark> is markup.
        "snippet": mark_safe(result.best.snippet_html()),
        "captures": [_capture(hit) for hit in result.captures],
    }


def _capture(hit: search.Hit) -> dict:
    replay = reverse("admin:crawls_crawl_replay", args=[hit.crawl_id])
    at = {"ts": wayback.timestamp(hit.captured_at)} if hit.captured_at else {}
    return {
        "hit": hit,
        "replay": f"{replay}?{urlencode({'url': hit.url, **at})}",
        "crawl": reverse("admin:crawls_crawl_change", args=[hit.crawl_id]),
    }
