"""Which URLs a seed's crawl may queue: the real crawler's scope types, depth and extra hops."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from archiver_crawler.config import CrawlConfig, SeedSpec

UNLIMITED_DEPTH = 1_000_000


def normalize_url(url: str) -> str | None:
    """The URL without its fragment, or None when it is not http(s)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))


def _scheme_agnostic(prefix: str) -> str:
    """Regex source matching `prefix` over http or https (redirects often switch scheme)."""
    scheme, rest = prefix.split("://", 1)
    return "^https?://" + re.escape(rest)


def scope_includes(scope_type: str, url: str) -> list[str]:
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if scope_type in ("page", "custom"):
        return []
    if scope_type == "page-spa":
        # Fragments are never fetched by an HTTP-only crawler, so this is the page itself.
        return ["^" + re.escape(url) + "#.+"]
    if scope_type == "prefix":
        path = parts.path or "/"
        return [_scheme_agnostic(origin + path[: path.rfind("/") + 1])]
    if scope_type == "host":
        return [_scheme_agnostic(origin + "/")]
    if scope_type == "domain":
        host = parts.netloc.removeprefix("www.")
        return ["^https?://([^/]+\\.)*" + re.escape(host + "/")]
    if scope_type == "any":
        return [".*"]
    raise ValueError(f"unknown scope type {scope_type}")


@dataclass(frozen=True)
class ScopeDecision:
    url: str
    out_of_scope: bool  # reached through an extra hop


class Seed:
    """A seed with its compiled scope rules (the real crawler's `isIncluded`)."""

    def __init__(self, seed_id: int, url: str, config: CrawlConfig, spec: SeedSpec | None = None):
        spec = spec or SeedSpec(url=url)
        self.id = seed_id
        self.url = normalize_url(url) or url
        include = list(spec.include) or list(config.include)
        scope_type = spec.scope_type or config.scope_type or ("custom" if include else "prefix")
        self.scope_type = scope_type
        self.include = [re.compile(rx) for rx in scope_includes(scope_type, self.url) + include]
        self.exclude = [re.compile(rx) for rx in (*spec.exclude, *config.exclude)]
        depth = spec.depth if spec.depth is not None else config.depth
        self.max_depth = UNLIMITED_DEPTH if depth < 0 else depth
        hops = spec.extra_hops if spec.extra_hops is not None else config.extra_hops
        self.max_extra_hops = hops

    def is_excluded(self, url: str, extra_excludes: list[re.Pattern] = ()) -> bool:
        return any(rx.search(url) for rx in (*self.exclude, *extra_excludes))

    def decide(self, url: str, depth: int, extra_hops: int,
               extra_excludes: list[re.Pattern] = ()) -> ScopeDecision | None:
        """Whether `url`, found at `depth` with `extra_hops` so far, may be queued."""
        if depth > self.max_depth:
            return None
        in_scope = any(rx.search(url) for rx in self.include)
        if not in_scope and not (self.max_extra_hops and extra_hops <= self.max_extra_hops):
            return None
        if self.is_excluded(url, extra_excludes):
            return None
        return ScopeDecision(url=url, out_of_scope=not in_scope)
