"""A browser crawl watched live in the admin (crawls/screencast.py): a page of frames, one
per tab, refreshed from watch.json every two seconds while it is open, and only then."""

from __future__ import annotations

from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from crawls import screencast
from crawls.admin.views import require
from crawls.admin.words import state_words
from crawls.models import Crawl


def in_browser_mode(crawl) -> bool:
    """Whether the crawl was added in browser mode (a corrupt config, not a dict, is not)."""
    return isinstance(crawl.config, dict) and crawl.config.get("browser") is True


def watch_page(modeladmin, request, pk: str):
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "crawl": crawl,
        "title": f"Watch crawl {crawl.short_id}", "browser": in_browser_mode(crawl),
    }
    return TemplateResponse(request, "admin/crawls/crawl/watch.html", context)


def watch_frames(modeladmin, request, pk: str):
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    if crawl.is_final:
        shown, why = [], f"The crawl is over: {state_words(crawl)}."
    else:
        shown, why = screencast.frames(crawl)
    return JsonResponse({"frames": shown, "why": why, "final": crawl.is_final},
                        headers={"Cache-Control": "no-store"})
