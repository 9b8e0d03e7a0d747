"""Loading one page: a URL in, a `PageResult` out (the response to archive, what it links to).

This is the one place where a page is fetched and read. The crawl loop, the scope, Redis and
the output never look at how: `HttpPageLoader` does one GET and parses HTML with selectolax;
`browser.loader.BrowserPageLoader` loads it in Chromium (see crawler/README.md, "Loading
a page").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urljoin, urlsplit

from archiver_crawler.dedup import Kept, KnownPayloads
from archiver_crawler.fetch import Fetched, Fetcher
from archiver_crawler.links import extract_html

HTML_TYPES = {"text/html", "application/xhtml+xml"}
REDIRECTS = {301, 302, 303, 307, 308}

# pages.jsonl `loadState`: the page was fetched / its HTML was parsed too.
LOADED = 2
PARSED = 3


@dataclass(frozen=True)
class PageResult:
    """A loaded page, before scope, queue or archive had a say."""

    fetched: Fetched  # the page's own response, archived by the crawler
    title: str = ""
    text: str = ""  # the page's visible text (pages.jsonl `text`, for search)
    load_state: int = LOADED
    links: list[str] | tuple[str, ...] = ()  # absolute URLs of the page's links
    # Absolute URLs of what a browser would load with the page (images, CSS, scripts): the
    # crawler fetches each once per crawl (claimed in `<id>:assets`) and archives it.
    requisites: list[str] | tuple[str, ...] = ()
    redirect: str | None = None  # a 3xx page's absolute target (then no links are read)
    # A loader that followed redirects itself (browser mode): where they ended.
    final_url: str | None = None
    # Browser mode: the URLs of what the page loaded with it (GETs), to claim once per
    # crawl, and the writer of the page's records: archive(warc, page_id, seen=...) with
    # seen(url) True for those the crawl holds already. None: `fetched` is archived.
    loaded: tuple[str, ...] = ()
    archive: Callable | None = None
    # A 304 to a conditional GET: the kept record it stands for (pages.jsonl lists the page
    # as that record was, and the search takes its text).
    not_modified: Kept | None = None


def not_modified(fetched: Fetched, url: str, known: KnownPayloads | None) -> PageResult | None:
    """A 304 to a conditional GET of `url`: the page as the org kept it (None for any other
    answer). It has no body to read links from: its links and requisites are the org's kept
    URLs of its host, handed on once (KnownPayloads.kept_urls)."""
    kept = known.kept(url) if known is not None and fetched.status == 304 else None
    if kept is None:
        return None
    pages, others = known.kept_urls(urlsplit(url).netloc)
    return PageResult(fetched, links=pages, requisites=others, not_modified=kept)


class PageLoader(Protocol):
    async def load(self, url: str) -> PageResult:
        """Load `url`; raise fetch.FetchError when no HTTP response came (the page fails)."""


class HttpPageLoader:
    """One GET (redirects not followed: each hop is a page of its own), HTML parsed."""

    def __init__(self, fetcher: Fetcher):
        self.fetcher = fetcher

    async def load(self, url: str) -> PageResult:
        fetched = await self.fetcher.fetch(url)
        location = fetched.header("location") if fetched.status in REDIRECTS else None
        if location:
            return PageResult(fetched, redirect=urljoin(url, location))
        unchanged = not_modified(fetched, url, self.fetcher.known)
        if unchanged is not None:
            return unchanged
        if fetched.mime in HTML_TYPES:
            extracted = extract_html(fetched.decoded_body(), url)
            return PageResult(fetched, extracted.title, extracted.text, PARSED,
                              extracted.links, extracted.requisites)
        return PageResult(fetched)
