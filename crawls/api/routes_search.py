"""/search: the archived pages whose text matches a query (crawls/search.py), ranked, a page
of results at a time, scoped to the token's org."""

from __future__ import annotations

import datetime as dt

from ninja import Query, Router

from crawls import search, search_groups
from crawls.api import pagination
from crawls.api.auth import caller, need, scope_org_id
from crawls.api.errors import ERRORS, ApiError, invalid, rate_limited
from crawls.api.schemas import Out
from crawls.lease import db_now

router = Router(tags=["search"])
MAX_OFFSET = 10_000  # ranked results are paged by offset: deep pages cost more, so they end
# A search counts as this many requests against its token's rate limit (600 a minute by
# default: 30 searches). Each is bounded by its work budget (crawls/search.py), so a token
# holds at most a thread's worth of searching, not all of gunicorn's threads (issue 36).
SEARCH_COST = 20


class SearchHit(Out):
    crawl: str
    org: str
    url: str
    title: str
    captured_at: dt.datetime | None
    file: str
    snippet: str
    snippet_html: str
    rank: float


class SearchCapture(Out):
    crawl: str
    org: str
    captured_at: dt.datetime | None
    file: str


class SearchResult(Out):
    url: str
    title: str
    snippet: str
    snippet_html: str
    rank: float
    captures: list[SearchCapture]


class SearchPage(Out):
    items: list[SearchHit]  # one per capture, as before `results` came (kept for old clients)
    results: list[SearchResult]  # the items grouped by URL, each with every capture of it
    next_cursor: str | None


@router.get("/search", response={200: SearchPage, **ERRORS}, summary="Search the archived pages")
def search_pages(request, q: str = Query(..., max_length=search.MAX_QUERY),
                 crawl: str | None = Query(None, max_length=32),
                 since: dt.datetime | None = None, limit: int = Query(20, ge=1, le=100),
                 cursor: str | None = Query(None, max_length=pagination.MAX_CURSOR)):
    """Best first. `q`: words (all must appear), `"a phrase"`, `word*`, `a OR b`, `-word` or
    `NOT word`, `( )` (docs/api.md, Search). `snippet_html` is escaped HTML whose only markup
    is `<mark>` around the matches. `results` are the `items` grouped by URL, each listing
    every capture of its URL that matches, newest first. An org-scoped token sees only its
    org's pages."""
    need(request, "crawls.view_crawl")
    _count_search(request)
    offset = pagination.int_cursor(cursor) or 0
    if offset > MAX_OFFSET:
        raise invalid(f"results past the first {MAX_OFFSET} are not paged: narrow the query")
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=dt.UTC)
    try:
        hits = search.search(q, org=scope_org_id(request), crawl=crawl, since=since,
                             limit=limit + 1, offset=offset)
        more, hits = len(hits) > limit, hits[:limit]
        results = search_groups.grouped(hits, q, org=scope_org_id(request), crawl=crawl, since=since)
    except search.QueryTooComplex as exc:
        raise ApiError(400, f"q: {exc}", code="query_too_complex") from None
    except search.QueryTooCostly as exc:
        raise ApiError(400, f"q: {exc}", code="query_too_costly") from None
    except search.QueryError as exc:
        raise invalid(f"q: {exc}") from None
    return {"items": [hit.as_dict() for hit in hits], "results": [r.as_dict() for r in results],
            "next_cursor": pagination.encode(str(offset + limit)) if more else None}


def _count_search(request) -> None:
    """The search's cost less the one request TokenAuth already counted; a token whose
    whole minute is less than a search may still make one."""
    _, token = caller(request)
    if token is None:
        return
    wait = token.count_request(db_now(), cost=min(SEARCH_COST, token.rate_limit) - 1)
    if wait is not None:
        raise rate_limited(f"token {token.prefix}: a search counts as {SEARCH_COST} requests, and "
                           f"this minute's {token.rate_limit} are used up; retry in {wait:.0f} s",
                           wait)
