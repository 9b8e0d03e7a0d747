"""What the browser made of one page: every exchange, links, text, screenshots, page info."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from archiver_crawler.browser.shots import Shot
from archiver_crawler.warc import Exchange

REDIRECTS = frozenset({301, 302, 303, 307, 308})


class LoadState:
    """browsertrix-crawler's numbers for how far a page got (a page record's loadState)."""

    FAILED = 0
    CONTENT_LOADED = 1  # DOMContentLoaded
    FULL_PAGE_LOADED = 2  # the wait-until condition met
    EXTRACTION_DONE = 3  # links and text read
    BEHAVIORS_DONE = 4


@dataclass
class Resource:
    """One request the page made: its exchange, or why archiver did not make it."""

    url: str
    resource_type: str  # CDP's: Document, Script, Stylesheet, Image, XHR, Fetch, Font, ...
    frame_id: str
    exchange: Exchange | None = None
    error: str = ""  # a refusal by the address policy or a failed fetch
    refused: bool = False


@dataclass
class PageCapture:
    url: str
    ts: datetime
    target_id: str = ""
    resources: list[Resource] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    title: str = ""
    text: str = ""
    screenshots: list[Shot] = field(default_factory=list)
    load_state: int = LoadState.FAILED
    error: str = ""
    js_errors: int = 0

    @property
    def screenshot(self) -> bytes | None:
        """The `view` screenshot's PNG, if one was taken."""
        return next((shot.data for shot in self.screenshots if shot.kind == "view"), None)

    def documents(self) -> list[Resource]:
        """The main frame's document requests in order: the page, then each redirect hop."""
        return [r for r in self.resources
                if r.resource_type == "Document" and r.frame_id == self.target_id]

    @property
    def main(self) -> Resource | None:
        """The main frame's last document: what the redirect chain ended at."""
        documents = self.documents()
        return documents[-1] if documents else None

    @property
    def status(self) -> int | None:
        main = self.main
        return main.exchange.status if main and main.exchange else None

    @property
    def final_url(self) -> str:
        main = self.main
        return main.url if main else self.url

    @property
    def mime(self) -> str:
        main = self.main
        if not main or not main.exchange:
            return ""
        value = next((v for k, v in main.exchange.response_headers
                      if k.lower() == "content-type"), "")
        return value.split(";")[0].strip().lower()

    @property
    def exchanges(self) -> list[Exchange]:
        return [r.exchange for r in self.resources if r.exchange is not None]

    def page_info(self, page_id: str, ts: str) -> dict:
        """The `urn:pageinfo:` record's JSON, as browsertrix-crawler writes it, plus counts."""
        urls = {}
        for r in self.resources:
            if r.exchange is not None:
                mime = next((v for k, v in r.exchange.response_headers
                             if k.lower() == "content-type"), "")
                urls[r.url] = {"status": r.exchange.status, "mime": mime.split(";")[0].strip(),
                               "type": r.resource_type}
        fetched = sum(1 for r in self.resources if r.exchange is not None)
        return {"pageid": page_id, "url": self.url, "finalUrl": self.final_url, "ts": ts,
                "status": self.status,
                "loadState": self.load_state, "urls": urls,
                "counts": {"jsErrors": self.js_errors, "resources": len(self.resources),
                           "fetched": fetched,
                           "refused": sum(1 for r in self.resources if r.refused),
                           "failed": sum(1 for r in self.resources
                                         if r.exchange is None and not r.refused)}}
