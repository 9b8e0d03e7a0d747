"""Links and page requisites from HTML (selectolax) and CSS (a url()/@import scan)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser as HTMLParser

from archiver_crawler.scope import normalize_url

_CSS_URL = re.compile(rb"""url\(\s*(['"]?)([^'")]+)\1\s*\)|@import\s+(['"])([^'"]+)\3""")

# Elements whose `src` a browser loads with the page.
_SRC_TAGS = {"img", "script", "iframe", "frame", "embed", "audio", "video", "source", "track",
             "input"}
_ONE_PASS = ("title, base[href], a[href], area[href], link[href], style, [src], [srcset], "
             "video[poster], [style]")
# Not text a reader sees: dropped before the page's text is taken.
_NOT_TEXT = ["script", "style", "noscript", "template", "svg"]
TEXT_LIMIT = 1 << 20  # characters of a page's text kept for pages.jsonl (a search index)
_LINK_RELS = {"stylesheet", "icon", "shortcut", "apple-touch-icon", "preload", "modulepreload",
              "manifest", "mask-icon"}


@dataclass
class Extracted:
    title: str = ""
    text: str = ""  # the visible text, whitespace collapsed (pages.jsonl `text`)
    links: list[str] = field(default_factory=list)
    requisites: list[str] = field(default_factory=list)


@lru_cache(maxsize=256)
def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@lru_cache(maxsize=256)
def _directory(url: str) -> str:
    """`url` up to its path's last slash: what a relative path is resolved against (the
    last segment, query and fragment of the base play no part in it)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    return f"{parts.scheme}://{parts.netloc}{path[: path.rfind('/') + 1]}"


_NEEDS_BASE = ""  # a link relative to the base's own last segment: see _add


# Sites repeat the same links on every page of a directory (navigation, index, glossary):
# each distinct (directory, link) is cleaned, joined and normalised once, not per occurrence
# (that was most of the crawler's CPU per page on documentation sites).
@lru_cache(maxsize=1 << 15)
def _resolve(directory: str, href: str) -> str | None:
    href = href.strip()
    if not href or href.startswith(("javascript:", "mailto:", "data:", "tel:", "#")):
        return None
    if href[0] == "/" and not href.startswith("//") and "/." not in href and "\\" not in href:
        # An absolute path, the common case: joining is prefixing the origin.
        return _origin(directory) + href
    if href[0] in "?;":
        return _NEEDS_BASE
    return normalize_url(urljoin(directory, href))


def _add(target: list[str], seen: set[str], base: str, href: str | None) -> None:
    if not href:
        return
    # The fragment is dropped by normalisation anyway: without it, the links to the sections
    # of one page share a key (an index page has thousands).
    url = _resolve(_directory(base), href.partition("#")[0])
    if url == _NEEDS_BASE:
        # Resolved against the base's last segment (and query), not its directory.
        url = normalize_url(urljoin(base, href.strip()))
    if url and url not in seen:
        seen.add(url)
        target.append(url)


def extract_html(body: bytes, url: str) -> Extracted:
    """Title, links and requisites of a page, in one pass over the matching nodes."""
    tree = HTMLParser(body)
    out = Extracted()
    base = url
    seen_links: set[str] = set()
    seen_req: set[str] = set()
    for node in tree.css(_ONE_PASS):
        tag, attrs = node.tag, node.attributes
        if tag == "title":
            if not out.title:
                out.title = " ".join(node.text().split())
        elif tag == "base":
            if base is url and attrs.get("href"):
                base = urljoin(url, attrs["href"])
        elif tag in ("a", "area"):
            _add(out.links, seen_links, base, attrs.get("href"))
        elif tag == "link":
            if set((attrs.get("rel") or "").lower().split()) & _LINK_RELS:
                _add(out.requisites, seen_req, base, attrs.get("href"))
        elif tag == "style":
            for ref in extract_css(node.text().encode(), base):
                _add(out.requisites, seen_req, base, ref)
        else:
            if tag in _SRC_TAGS:
                _add(out.requisites, seen_req, base, attrs.get("src"))
            if "srcset" in attrs and tag in ("img", "source"):
                for candidate in (attrs.get("srcset") or "").split(","):
                    _add(out.requisites, seen_req, base, candidate.strip().split(" ")[0])
            if tag == "video":
                _add(out.requisites, seen_req, base, attrs.get("poster"))
        if "style" in attrs and tag != "style":
            for ref in extract_css((attrs.get("style") or "").encode(), base):
                _add(out.requisites, seen_req, base, ref)
    out.text = page_text(tree)
    return out


def page_text(tree: HTMLParser) -> str:
    """The text of the body, as `--text to-pages` gives it: no scripts or styles, whitespace
    collapsed, bounded (a page of megabytes of text would bloat pages.jsonl and the index)."""
    root = tree.body or tree.root
    if root is None:
        return ""
    tree.strip_tags(_NOT_TEXT)
    return " ".join(root.text(separator=" ").split())[:TEXT_LIMIT]


def extract_css(body: bytes, url: str) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    for match in _CSS_URL.finditer(body):
        raw = match.group(2) or match.group(4)
        _add(found, seen, url, raw.decode("utf-8", "replace"))
    return found
