"""Links and page requisites from HTML (selectolax) and CSS (a url()/@import scan)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser as HTMLParser

from archiver_crawler.scope import normalize_url

_CSS_URL = re.compile(rb"""url\(\s*(['"]?)([^'")]+)\1\s*\)|@import\s+(['"])([^'"]+)\3""")

# (selector, attribute) pairs whose URL a browser would load with the page.
_REQUISITES = (
    ("img[src]", "src"),
    ("script[src]", "src"),
    ("iframe[src]", "src"),
    ("frame[src]", "src"),
    ("embed[src]", "src"),
    ("audio[src]", "src"),
    ("video[src]", "src"),
    ("video[poster]", "poster"),
    ("source[src]", "src"),
    ("track[src]", "src"),
    ("input[src]", "src"),
)
_SRCSET = ("img[srcset]", "source[srcset]")
_LINK_RELS = {"stylesheet", "icon", "shortcut", "apple-touch-icon", "preload", "modulepreload",
              "manifest", "mask-icon"}


@dataclass
class Extracted:
    title: str = ""
    links: list[str] = field(default_factory=list)
    requisites: list[str] = field(default_factory=list)


def _add(target: list[str], seen: set[str], base: str, href: str | None) -> None:
    if not href:
        return
    href = href.strip()
    if not href or href.startswith(("javascript:", "mailto:", "data:", "tel:", "#")):
        return
    url = normalize_url(urljoin(base, href))
    if url and url not in seen:
        seen.add(url)
        target.append(url)


def extract_html(body: bytes, url: str) -> Extracted:
    tree = HTMLParser(body)
    out = Extracted()
    title = tree.css_first("title")
    out.title = " ".join(title.text().split()) if title else ""
    base_node = tree.css_first("base[href]")
    base = urljoin(url, base_node.attributes.get("href") or "") if base_node else url

    seen_links: set[str] = set()
    for node in tree.css("a[href], area[href]"):
        _add(out.links, seen_links, base, node.attributes.get("href"))

    seen_req: set[str] = set()
    for selector, attr in _REQUISITES:
        for node in tree.css(selector):
            _add(out.requisites, seen_req, base, node.attributes.get(attr))
    for selector in _SRCSET:
        for node in tree.css(selector):
            for candidate in (node.attributes.get("srcset") or "").split(","):
                _add(out.requisites, seen_req, base, candidate.strip().split(" ")[0])
    for node in tree.css("link[href]"):
        rels = set((node.attributes.get("rel") or "").lower().split())
        if rels & _LINK_RELS:
            _add(out.requisites, seen_req, base, node.attributes.get("href"))
    for node in tree.css("style"):
        for ref in extract_css(node.text().encode(), base):
            if ref not in seen_req:
                seen_req.add(ref)
                out.requisites.append(ref)
    for node in tree.css("[style]"):
        for ref in extract_css((node.attributes.get("style") or "").encode(), base):
            if ref not in seen_req:
                seen_req.add(ref)
                out.requisites.append(ref)
    return out


def extract_css(body: bytes, url: str) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    for match in _CSS_URL.finditer(body):
        raw = match.group(2) or match.group(4)
        _add(found, seen, url, raw.decode("utf-8", "replace"))
    return found
