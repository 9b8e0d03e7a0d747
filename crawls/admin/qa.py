"""The admin's quality review of a crawl (runner/qa.py, `archiver qa`): its summary and its
pages worst first, each with the replay's screenshot beside the capture's."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from archiver import conf
from crawls import kept_wacz
from crawls.admin.views import require
from crawls.models import Crawl, PageReview, review_summary

PNG = b"\x89PNG\r\n\x1a\n"
PER_PAGE = 25


def qa_page(modeladmin, request, pk: str):
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    reviews = Paginator(PageReview.objects.filter(crawl=crawl).order_by("score", "id"), PER_PAGE)
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "crawl": crawl,
        "title": f"Quality review of crawl {crawl.short_id}", "summary": review_summary(crawl),
        "page": reviews.get_page(request.GET.get("page")),
    }
    return TemplateResponse(request, "admin/crawls/crawl/qa.html", context)


def qa_shot(modeladmin, request, pk: str, review: int, kind: str):
    """A review's screenshot: the replay's (kept under the data dir) or the capture's (its
    urn:view: record). Only a PNG is sent, as image/png that no browser may sniff or run."""
    require(request, "view")
    row = get_object_or_404(PageReview, pk=review, crawl_id=pk)
    settings = conf.get()
    data = None
    if kind == "replay" and row.replay_shot:
        path = settings.data_dir / row.replay_shot
        data = path.read_bytes() if path.is_file() else None
    elif kind == "capture" and row.has_capture_shot:
        data = capture_shot(row, settings)
    if not data or not data.startswith(PNG):
        raise Http404("no such screenshot")
    response = HttpResponse(data, content_type="image/png")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=300"
    return response


def capture_shot(row: PageReview, settings) -> bytes | None:
    with kept_wacz.Archives(settings) as archives:
        for crawl_file in row.crawl.files.order_by("-created_at", "-pk"):
            try:
                view = kept_wacz.screenshots(archives.open(crawl_file)).get(row.url)
            except kept_wacz.DiffRefused:
                continue
            if view is not None:
                view.file = crawl_file
                record = archives.record(view)
                return kept_wacz.warc_block(record) if record else None
    return None
