"""Search results grouped by URL: a page archived by several crawls is one result listing its
captures (crawl, capture time, archive), not one result per crawl (issue 41).

A page of results is searched as before (crawls/search.py, best first); its hits are grouped
by URL in the order of each URL's best hit, and each group's captures are completed by one
more search of the same query narrowed to those URLs, so a capture ranked past this page is
listed with its URL all the same. The search's work budget bounds that second search too.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from crawls import search

MAX_CAPTURES = search.MAX_LIMIT  # captures looked up for one page of results, all URLs together


@dataclass(frozen=True)
class Result:
    best: search.Hit  # the best-ranked capture: its title and snippet are the result's
    captures: tuple[search.Hit, ...]  # every capture of the URL matching the query, newest first

    @property
    def url(self) -> str:
        return self.best.url

    def as_dict(self) -> dict:
        return {"url": self.url, "title": self.best.title, "snippet": self.best.snippet_text(),
                "snippet_html": self.best.snippet_html(), "rank": self.best.rank,
                "captures": [capture_dict(hit) for hit in self.captures]}


def capture_dict(hit: search.Hit) -> dict:
    return {"crawl": hit.crawl_id, "org": hit.org,
            "captured_at": hit.captured_at.isoformat() if hit.captured_at else None,
            "file": hit.filename}


def grouped(hits: list[search.Hit], query: str, *, org: int | None = None,
            crawl: str | None = None, since: dt.datetime | None = None) -> list[Result]:
    """`hits` (a page of search results) as one Result per URL, best first."""
    best: dict[str, search.Hit] = {}
    for hit in hits:
        best.setdefault(hit.url, hit)
    if not best:
        return []
    others = search.search(query, org=org, crawl=crawl, since=since, limit=MAX_CAPTURES,
                           urls=list(best))
    captures: dict[str, dict[tuple, search.Hit]] = {url: {} for url in best}
    for hit in [*hits, *others]:
        captures[hit.url].setdefault((hit.crawl_id, hit.filename, hit.captured_at), hit)
    return [Result(best[url], tuple(sorted(captures[url].values(), key=_newest_first)))
            for url in best]


def _newest_first(hit: search.Hit) -> tuple:
    when = hit.captured_at or dt.datetime.min.replace(tzinfo=dt.UTC)
    return (-when.timestamp(), hit.crawl_id)
