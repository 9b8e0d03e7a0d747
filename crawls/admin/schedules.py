"""The admin of schedules: the crawl form plus a cron expression."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from crawls import schedules
from crawls.admin.forms import BROWSER_FIELDS, ScheduleForm, next_runs
from crawls.admin.views import may
from crawls.admin.words import PlainTitles
from crawls.lease import db_now
from crawls.models import Schedule, first_text


@admin.register(Schedule)
class ScheduleAdmin(PlainTitles, admin.ModelAdmin):
    """A schedule is edited with the crawl form plus its cron expression."""

    form = ScheduleForm
    list_display = ("id", "cron", "first_seed", "org", "enabled", "retry_at", "last_crawl")
    list_filter = ("enabled", "org")
    list_select_related = ("org", "last_crawl")
    readonly_fields = ("next_run_times", "retry_at", "last_crawl", "created_at")
    fieldsets = (
        (None, {"fields": ("cron", "next_run_times", "enabled", "org", "tags")}),
        ("Crawl", {"fields": ("seeds", "scope_type", "depth", "extra_hops", "page_limit",
                              "size_limit", "time_limit", "include", "exclude", "workers",
                              "scale", "user_agent", "use_robots", "dedup", "qa", "host_rate", "sitemap",
                              "sitemap_since", "seed_file")}),
        ("Browser", {"fields": BROWSER_FIELDS, "classes": ("collapse",)}),
        ("Change alerts", {"fields": ("watch_what", "watch_urls", "watch_selector")}),
        ("State", {"fields": ("retry_at", "last_crawl", "created_at")}),
    )

    class Media:
        js = ["crawls/tags.js"]

    # A schedule queues crawls of whatever seeds it holds: adding or changing one is, in
    # effect, adding crawls.
    def has_add_permission(self, request):
        return super().has_add_permission(request) and may(request, "add")

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and may(request, "add")

    @admin.display(description="seed")
    def first_seed(self, obj):
        seed = first_text(obj.stored_seeds) or "-"
        return format_html('<span class="crawl-seed" title="{}">{}</span>', seed, seed)

    @admin.display(description="next runs (UTC)")
    def next_run_times(self, obj):
        if not obj or not obj.pk:
            return "shown once saved"
        if not obj.enabled:
            return "none: the schedule is disabled"
        try:
            slots = next_runs(obj.cron, db_now())
        except ValueError as exc:
            return str(exc)
        return ", ".join(f"{slot:%Y-%m-%d %H:%M}" for slot in slots)

    def save_model(self, request, obj, form, change):
        # A schedule is due when retry_at <= now; NULL would hide an enabled one for ever.
        if not obj.enabled:
            obj.retry_at = None
        elif obj.retry_at is None or "cron" in form.changed_data:
            obj.retry_at = schedules.next_slot(obj.cron, db_now())
        super().save_model(request, obj, form, change)
