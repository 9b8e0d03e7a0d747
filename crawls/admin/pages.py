"""A crawl page by page (issue 41): every page it archived with its thumbnail, title, HTTP
status, archived size, text length and quality score, each opening its replay.

The sizes and thumbnails come from the kept WACZs' indexes (`urn:thumbnail:` records, which
browser-mode crawls take by default): an index is read once per kept file and remembered for
the next pages of the list, so paging through a large crawl reads it once, not per page.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from archiver_crawler.scope import normalize_url
from django.core.paginator import Paginator
from django.db.models import Max
from django.db.models.functions import Length
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from archiver import conf
from crawls import kept_wacz
from crawls.admin.views import require
from crawls.config import human_size
from crawls.models import Crawl, PageReview, PageText

PER_PAGE = 50
KEPT_INDEXES = 4  # kept files whose page facts are remembered (a 100k-page index is ~20 MB)
IMAGE_MAGIC = {b"\xff\xd8\xff": "image/jpeg", b"\x89PNG\r\n\x1a\n": "image/png"}


@dataclass
class PageFacts:
    size: int | None = None  # bytes of the page's response record, as kept (compressed)
    thumbnail: kept_wacz.Capture | None = None


_facts: OrderedDict[tuple, dict[str, PageFacts]] = OrderedDict()
_facts_lock = threading.Lock()


def file_facts(archives: kept_wacz.Archives, crawl_file) -> dict[str, PageFacts]:
    """Each page of one kept WACZ by normalised URL: its size and thumbnail record."""
    key = (crawl_file.pk, crawl_file.path, crawl_file.size)
    with _facts_lock:
        if key in _facts:
            _facts.move_to_end(key)
            return _facts[key]
    archive = archives.open(crawl_file)
    facts: dict[str, PageFacts] = {}
    for url, capture in kept_wacz.read_index(archive).items():
        facts[url] = PageFacts(size=capture.length or None)
    for url, shot in kept_wacz.screenshots(archive, "thumbnail").items():
        shot.file = crawl_file
        facts.setdefault(url, PageFacts()).thumbnail = shot
    with _facts_lock:
        _facts[key] = facts
        while len(_facts) > KEPT_INDEXES:
            _facts.popitem(last=False)
    return facts


def crawl_facts(archives: kept_wacz.Archives, crawl) -> tuple[dict[str, PageFacts], str]:
    """The facts of every kept file of a crawl (a later file's win), and why some are missing."""
    merged: dict[str, PageFacts] = {}
    problem = ""
    for crawl_file in crawl.files.order_by("created_at", "pk"):
        try:
            facts = file_facts(archives, crawl_file)
        except kept_wacz.DiffRefused as exc:
            problem = f"sizes and thumbnails are missing from {crawl_file.path}: {exc}"
            continue
        for url, fact in facts.items():
            known = merged.setdefault(url, PageFacts())
            known.size = fact.size or known.size
            known.thumbnail = fact.thumbnail or known.thumbnail
    return merged, problem


def pages_page(modeladmin, request, pk: str):
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    page = Paginator(crawl.snapshots.order_by("id"), PER_PAGE).get_page(request.GET.get("page"))
    urls = [snapshot.url for snapshot in page]
    text_lengths = dict(PageText.objects.filter(crawl=crawl, url__in=urls).values("url")
                        .annotate(n=Max(Length("text"))).values_list("url", "n"))
    scores = dict(PageReview.objects.filter(crawl=crawl, url__in=urls).values_list("url", "score"))
    with kept_wacz.Archives() as archives:
        facts, problem = crawl_facts(archives, crawl)
    rows = []
    for snapshot in page:
        fact = facts.get(normalize_url(snapshot.url) or snapshot.url, PageFacts())
        rows.append({"snapshot": snapshot, "size": human_size(fact.size) if fact.size else "",
                     "thumbnail": fact.thumbnail is not None,
                     "text_length": text_lengths.get(snapshot.url), "score": scores.get(snapshot.url)})
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "crawl": crawl,
        "title": f"Pages of crawl {crawl.short_id}", "page": page, "rows": rows, "problem": problem,
        "has_files": crawl.files.exists(),
    }
    return TemplateResponse(request, "admin/crawls/crawl/pages.html", context)


def page_thumbnail(modeladmin, request, pk: str, snapshot: int):
    """A page's thumbnail as the crawl recorded it (its `urn:thumbnail:` record). Only a JPEG
    or PNG is sent, with its own type, that no browser may sniff or run."""
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    row = get_object_or_404(crawl.snapshots, pk=snapshot)
    url = normalize_url(row.url) or row.url
    data = None
    with kept_wacz.Archives(conf.get()) as archives:
        facts, _problem = crawl_facts(archives, crawl)
        shot = facts.get(url, PageFacts()).thumbnail
        if shot is not None:
            record = archives.record(shot)
            data = kept_wacz.warc_block(record) if record else None
    mime = next((kind for magic, kind in IMAGE_MAGIC.items() if data and data.startswith(magic)), None)
    if mime is None:
        raise Http404("no thumbnail of this page")
    response = HttpResponse(data, content_type=mime)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=3600"
    return response
