"""The admin's home page, the control room: what runs now (live), what waits and why, each
org's storage and quota use, recent failures, recent collections, a search box and "Add a
crawl". It replaces Django's list of tables, which stays folded at the bottom.

Its queries are bounded whatever the number of crawls: each section is one query with a
limit (tests/test_admin.py counts them).
"""

from __future__ import annotations

import shutil

from django.apps import apps
from django.contrib.admin import AdminSite
from django.db.models import Count
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from archiver import conf
from crawls.admin.crawl import crawl_title, progress_cell, state_cell
from crawls.admin.org import with_usage
from crawls.admin.views import may
from crawls.admin.words import GROUP_OF, GROUPS, one_line_reason
from crawls.cli import age, duration
from crawls.config import human_size
from crawls.models import Crawl, CrawlStatus, Org

S = CrawlStatus
SHOWN = 20  # rows per section; the full lists are one click away
TEMPLATE = "admin/crawls/home.html"


def url_or_none(name: str) -> str | None:
    """A page another part of archiver may not have yet (contract 3: search, collections)."""
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


def crawl_rows(crawls, now) -> list[dict]:
    return [{"crawl": crawl, "title": crawl_title(crawl), "state": state_cell(crawl),
             "progress": progress_cell(crawl), "reason": one_line_reason(crawl),
             "org": crawl.org.name if crawl.org_id else "-",
             "ran": duration(crawl.elapsed_now(now)), "age": age(crawl.created_at, now),
             "url": reverse("admin:crawls_crawl_change", args=[crawl.pk])} for crawl in crawls]


def counts_by_group() -> dict[str, int]:
    counts = dict.fromkeys(GROUPS, 0)
    for row in Crawl.objects.order_by().values("status").annotate(n=Count("id")):
        counts[GROUP_OF.get(row["status"], "failed")] += row["n"]
    return counts


def org_rows() -> list[dict]:
    rows = []
    for org in with_usage(Org.objects.order_by("name"))[:SHOWN]:
        quota = org.storage_quota_bytes
        rows.append({
            "org": org, "stored": human_size(org.bytes_stored),
            "quota": human_size(quota) if quota else "no quota",
            "percent": min(100, round(100 * org.bytes_stored / quota)) if quota else None,
            "minutes": f"{org.month_seconds / 60:.0f}"
                       + (f" of {org.exec_minutes_quota}" if org.exec_minutes_quota else ""),
            "active": org.active_count,
        })
    return rows


def recent_collections() -> tuple[list, str | None]:
    try:
        model = apps.get_model("crawls", "Collection")
    except LookupError:  # contract 3: the collections helper adds it
        return [], None
    return list(model.objects.order_by("-pk")[:5]), url_or_none("admin:crawls_collection_changelist")


def disk() -> dict | None:
    try:
        usage = shutil.disk_usage(conf.get().data_dir)
    except OSError:
        return None
    return {"free": human_size(usage.free), "total": human_size(usage.total),
            "percent": round(100 * usage.used / usage.total) if usage.total else 0}


def signing() -> dict | None:
    """How archives are signed, and archiver's public key (for those who check them)."""
    from crawls import wacz_auth

    settings = conf.get()
    if settings.signing_url:
        return {"domain": True}
    try:
        public = wacz_auth.public_key(settings.data_dir)
    except (OSError, ValueError):
        return None
    return {"fingerprint": wacz_auth.fingerprint(public), "public_key": public,
            "used": len(wacz_auth.known_keys(settings.data_dir))}


def home_context(request) -> dict:
    now = timezone.now()
    crawls = Crawl.objects.select_related("org").with_running_processes()  # "ran" without a query each
    running = crawls.filter(status__in=GROUPS["active"]).order_by("started_at")
    waiting = crawls.filter(status__in=(*S.NOT_STARTED, S.PAUSED)).order_by("created_at")
    failed = crawls.filter(status=S.FAILED).order_by("-finished_at", "-created_at")
    collections, collections_url = recent_collections()
    return {
        "running": crawl_rows(running[:SHOWN], now),
        "waiting": crawl_rows(waiting[:SHOWN], now),
        "failures": crawl_rows(failed[:10], now),
        "counts": counts_by_group(),
        "orgs": org_rows(),
        "disk": disk(),
        "signing": signing(),
        "collections": collections, "collections_url": collections_url,
        "search_url": url_or_none("admin:archiver_search"),
        "add_url": reverse("admin:crawls_crawl_add") if may(request, "add") else None,
        "list_url": reverse("admin:crawls_crawl_changelist"),
        "live_url": reverse("admin:crawls_crawl_live"),
    }


def index(site: AdminSite, request, extra_context=None):
    """AdminSite.index with the control room's context and template."""
    context = {**home_context(request), **(extra_context or {}), "title": "Control room"}
    site.index_template = TEMPLATE
    return AdminSite.index(site, request, context)
