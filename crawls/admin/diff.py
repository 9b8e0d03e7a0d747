"""The admin's diff page: what changed from a crawl to another of its org, and one page's
text diff (crawls/diffing.py). Reached by "Compare with…" on a crawl's page."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from crawls import diffing
from crawls.admin.views import require
from crawls.admin.words import group_of
from crawls.models import Crawl, CrawlStatus

CHOICES = 30  # crawls offered by "Compare with…"
SEED_SHOWN = 60  # characters of a crawl's seed in the picker: an option is one line


def others(crawl: Crawl):
    """The ended crawls of its org that kept archives, newest first, for "Compare with…",
    each with `said`: its state, pages and seed as the picker shows them."""
    rows = (Crawl.objects.filter(org_id=crawl.org_id, status__in=CrawlStatus.FINAL,
                                 files__isnull=False)
            .exclude(pk=crawl.pk).distinct().order_by("-created_at")[:CHOICES])
    for row in rows:
        row.said = f"{group_of(row)} · {row.pages_done} pages · {Truncator(seed_of(row)).chars(SEED_SHOWN)}"
    return rows


def seed_of(crawl: Crawl) -> str:
    seeds = crawl.seeds if isinstance(crawl.seeds, list) else []
    first = next((seed for seed in seeds if isinstance(seed, str)), "-")
    return first + (f" and {len(seeds) - 1} more" if len(seeds) > 1 else "")


def diff_page(modeladmin, request, pk: str):
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    other_id = request.GET.get("with", "")
    other = Crawl.objects.filter(pk=other_id).first() if other_id else None
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "crawl": crawl,
        "title": f"Compare crawl {crawl.short_id}", "others": others(crawl), "other": other,
    }
    if other_id and other is None:
        context["refusal"] = f"no crawl {other_id[:32]}"
    elif other is not None:
        # The earlier crawl is A, so "added" means added since then.
        a, b = sorted((crawl, other), key=lambda row: row.created_at)
        try:
            context["diff"] = diffing.compare(a, b)
            context["a"], context["b"] = a, b
            page = request.GET.get("page")
            if page:
                table = diffing.text_diff_html(a, b, page)
                # difflib.HtmlDiff escapes every line of the texts it is given.
                context["page"], context["table"] = page, mark_safe(table) if table else None  # noqa: S308
        except diffing.DiffRefused as exc:
            context["refusal"] = str(exc)
    return TemplateResponse(request, "admin/crawls/crawl/diff.html", context)
