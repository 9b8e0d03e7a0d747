"""The admin: crawls (mostly read-only, with the same actions as the CLI), orgs and schedules.

Actions call the model's transition methods, exactly like the CLI, so the admin can never
put a crawl into a state the CLI could not. Webhooks are registered by their own module.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, FloatField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.forms.models import BaseInlineFormSet
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from archiver.errors import ConfigError, NotAllowed
from crawls import schedules, wake
from crawls.admin_login import RateLimitedLoginForm
from crawls.cli import age, duration
from crawls.config import MAX_SIZE, CrawlConfig, human_size, parse_size
from crawls.lease import db_now
from crawls.models import (
    Crawl,
    CrawlEvent,
    CrawlFile,
    CrawlLog,
    CrawlStatus,
    Org,
    OrgUsage,
    Process,
    Schedule,
    Snapshot,
    month_start,
)

INLINE_ROWS = 50  # a 100k-snapshot crawl must still render: inlines show the newest rows


def progress_html(done: int, found: int):
    return format_html(
        '<progress value="{}" max="{}" style="width:7em"></progress> {}/{}',
        done, max(found, 1), done, found,
    )


# --- crawls --------------------------------------------------------------------------------


class NewestRowsFormSet(BaseInlineFormSet):
    """Shows only the newest INLINE_ROWS rows; the full list is a link away."""

    def get_queryset(self):
        if not hasattr(self, "_newest"):
            self._newest = list(super().get_queryset().order_by("-id")[:INLINE_ROWS])
        return self._newest


class ReadOnlyInline(admin.TabularInline):
    formset = NewestRowsFormSet
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ProcessInline(ReadOnlyInline):
    model = Process
    fields = ("instance", "hostname", "launcher", "status", "exit_code", "exit_reason",
              "started_at", "ended_at")


class CrawlFileInline(ReadOnlyInline):
    model = CrawlFile
    fields = ("path", "size_human", "sha256", "created_at")

    @admin.display(description="size")
    def size_human(self, obj):
        return human_size(obj.size)


class SnapshotInline(ReadOnlyInline):
    model = Snapshot
    fk_name = "crawl"
    fields = ("url", "depth", "status", "http_status", "mime", "captured_at")
    verbose_name_plural = f"snapshots (newest {INLINE_ROWS})"


class CrawlLogInline(ReadOnlyInline):
    model = CrawlLog
    fields = ("created_at", "level", "source", "message")
    verbose_name_plural = f"log lines (newest {INLINE_ROWS})"


class CrawlEventInline(ReadOnlyInline):
    model = CrawlEvent
    fields = ("created_at", "name", "event_id")
    verbose_name_plural = f"events (newest {INLINE_ROWS})"


# Which model permission each crawl action needs (issue 10 §6): a cancel discards the
# crawl's partial files, so it needs the right to delete crawls.
ACTION_PERMISSION = {
    "pause": "change", "resume": "change", "stop": "change", "retry": "change",
    "cancel": "remove",
}
PERMISSION_CODENAME = {"change": "crawls.change_crawl", "remove": "crawls.delete_crawl",
                       "add": "crawls.add_crawl", "view": "crawls.view_crawl"}


def may(request, permission: str) -> bool:
    return request.user.has_perm(PERMISSION_CODENAME[permission])


def crawl_action(method: str, done: str):
    """An admin action calling `crawl.<method>(now)` on each selected crawl."""
    permission = ACTION_PERMISSION[method]

    def action(modeladmin, request, queryset):
        if not may(request, permission):  # also hidden from the menu; a forged POST ends here
            raise PermissionDenied
        now = db_now()
        succeeded = 0
        for crawl in queryset.select_related("org"):
            try:
                getattr(crawl, method)(now)
            except NotAllowed as exc:
                modeladmin.message_user(request, str(exc), messages.WARNING)
            else:
                succeeded += 1
        if succeeded:
            wake.nudge()
            modeladmin.message_user(request, f"{done}: {succeeded} crawl(s)", messages.SUCCESS)

    action.__name__ = f"{method}_crawls"
    return admin.action(description=f"{method.capitalize()} selected crawls",
                        permissions=[permission])(action)


@admin.register(Crawl)
class CrawlAdmin(admin.ModelAdmin):
    list_display = ("short_id", "first_seed", "status", "intent", "progress", "size",
                    "org", "age")
    list_filter = ("status", "org")
    list_select_related = ("org",)
    search_fields = ("^id", "seeds")
    ordering = ("-created_at",)
    show_full_result_count = False
    actions = [
        crawl_action("pause", "pause done or requested"),
        crawl_action("resume", "resumed"),
        crawl_action("stop", "stop done or requested"),
        crawl_action("cancel", "cancel done or requested"),
        crawl_action("retry", "queued again"),
    ]
    inlines = (ProcessInline, CrawlFileInline, CrawlEventInline, CrawlLogInline, SnapshotInline)
    fieldsets = (
        (None, {"fields": ("id", "org", "seeds", "tags", "status", "intent", "stop_reason",
                           "waiting_reason", "error")}),
        ("Progress", {"fields": ("progress", "pages_failed", "size", "running_time",
                                 "execution_time", "attempts", "scale", "snapshot_count")}),
        ("Configuration", {"fields": ("config", "config_override")}),
        ("Times", {"fields": ("created_at", "started_at", "paused_at", "finished_at",
                              "progress_at", "updated_at")}),
        ("Lease", {"classes": ("collapse",),
                   "fields": ("retry_at", "lease_owner", "lease_token", "redis_db", "stalls")}),
    )
    # People edit tags only; state and counters change through actions and the runner.
    readonly_fields = tuple(
        field
        for _, options in fieldsets for field in options["fields"] if field != "tags"
    )

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def has_add_permission(self, request):
        return False  # crawls are added with `archiver add` or by schedules

    def has_delete_permission(self, request, obj=None):
        # Django's own delete page would list every snapshot and leave the files behind;
        # crawls are deleted with their files by the "delete" button (`remove` below).
        return False

    def has_remove_permission(self, request, obj=None):
        return may(request, "remove")

    @admin.display(description="id", ordering="id")
    def short_id(self, obj):
        return obj.short_id

    @admin.display(description="seed")
    def first_seed(self, obj):
        more = f" (+{len(obj.seeds) - 1})" if len(obj.seeds) > 1 else ""
        return f"{obj.seeds[0]}{more}" if obj.seeds else "-"

    @admin.display(description="pages done/found")
    def progress(self, obj):
        return progress_html(obj.pages_done, obj.pages_found)

    @admin.display(description="size", ordering="size_bytes")
    def size(self, obj):
        return human_size(obj.size_bytes)

    @admin.display(description="age", ordering="created_at")
    def age(self, obj):
        return age(obj.created_at, timezone.now())

    @admin.display(description="running time")
    def running_time(self, obj):
        return duration(obj.elapsed_seconds)

    @admin.display(description="execution time")
    def execution_time(self, obj):
        return duration(obj.exec_seconds)

    @admin.display(description="snapshots")
    def snapshot_count(self, obj):
        url = reverse("admin:crawls_snapshot_changelist") + "?" + urlencode({"crawl__id__exact": obj.pk})
        return format_html('{} (<a href="{}">all snapshots</a>)', obj.snapshots.count(), url)


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    """Every snapshot of a crawl, paginated; reached from the crawl's page."""

    list_display = ("url", "crawl", "depth", "status", "http_status", "captured_at")
    list_filter = ("status",)
    list_select_related = ("crawl",)
    search_fields = ("url",)
    raw_id_fields = ("crawl", "parent")
    show_full_result_count = False
    list_per_page = 100

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# --- orgs ----------------------------------------------------------------------------------


class SizeField(forms.CharField):
    """A byte count typed as `500GB`, `2TiB` or bytes; empty means unlimited."""

    def prepare_value(self, value):
        return str(value) if isinstance(value, int) else value

    def to_python(self, value):
        value = super().to_python(value)
        if not value:
            return None
        try:
            return parse_size(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class OrgForm(forms.ModelForm):
    storage_quota_bytes = SizeField(
        required=False, label="Storage quota",
        help_text=f"For example 500GB or 2TiB (at most {human_size(MAX_SIZE)}); empty = unlimited.",
    )

    class Meta:
        model = Org
        fields = ("slug", "name", "max_concurrent_crawls", "storage_quota_bytes",
                  "exec_minutes_quota", "max_pages_per_crawl")


@admin.register(Org)
class OrgAdmin(admin.ModelAdmin):
    form = OrgForm
    list_display = ("slug", "name", "active", "stored", "exec_minutes_this_month",
                    "max_concurrent_crawls", "max_pages_per_crawl")
    search_fields = ("slug", "name")
    readonly_fields = ("stored", "exec_minutes_this_month", "active", "created_at")
    fieldsets = (
        (None, {"fields": ("slug", "name")}),
        ("Quotas (empty = unlimited)", {"fields": (
            "max_concurrent_crawls", "storage_quota_bytes", "exec_minutes_quota",
            "max_pages_per_crawl",
        )}),
        ("Usage", {"fields": ("stored", "exec_minutes_this_month", "active", "created_at")}),
    )

    def get_queryset(self, request):
        this_month = OrgUsage.objects.filter(org=OuterRef("pk"), month=month_start(timezone.now()))
        return super().get_queryset(request).annotate(
            active_count=Count("crawls", filter=Q(crawls__status__in=CrawlStatus.ACTIVE)),
            month_seconds=Coalesce(Subquery(this_month.values("exec_seconds")[:1]), Value(0.0),
                                   output_field=FloatField()),
        )

    @admin.display(description="active crawls", ordering="active_count")
    def active(self, obj):
        return getattr(obj, "active_count", 0)

    @admin.display(description="stored", ordering="bytes_stored")
    def stored(self, obj):
        quota = f" of {human_size(obj.storage_quota_bytes)}" if obj.storage_quota_bytes else ""
        return f"{human_size(obj.bytes_stored)}{quota}"

    @admin.display(description="exec minutes this month")
    def exec_minutes_this_month(self, obj):
        used = f"{getattr(obj, 'month_seconds', 0) / 60:.0f}"
        return f"{used} of {obj.exec_minutes_quota}" if obj.exec_minutes_quota else used


# --- schedules -----------------------------------------------------------------------------


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = ("org", "cron", "config", "tags", "enabled")

    def clean_cron(self):
        try:
            return schedules.check_cron(self.cleaned_data["cron"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_config(self):
        config = self.cleaned_data["config"]
        if not isinstance(config, dict):
            raise forms.ValidationError("the config is a JSON object such as {\"seeds\": [\"https://...\"]}")
        try:
            return CrawlConfig.parse(**config).model_dump(mode="json")
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_tags(self):
        tags = self.cleaned_data["tags"]
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise forms.ValidationError("tags are a JSON list of strings")
        return tags


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("id", "cron", "first_seed", "org", "enabled", "retry_at", "last_crawl")
    list_filter = ("enabled", "org")
    list_select_related = ("org", "last_crawl")
    readonly_fields = ("retry_at", "last_crawl", "created_at")

    # A schedule queues crawls of whatever seeds it holds: adding or changing one is, in
    # effect, adding crawls.
    def has_add_permission(self, request):
        return super().has_add_permission(request) and may(request, "add")

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and may(request, "add")

    @admin.display(description="seed")
    def first_seed(self, obj):
        seeds = obj.config.get("seeds") or ["-"]
        return seeds[0]

    def save_model(self, request, obj, form, change):
        # A schedule is due when retry_at <= now; NULL would hide an enabled one for ever.
        if not obj.enabled:
            obj.retry_at = None
        elif obj.retry_at is None or "cron" in form.changed_data:
            obj.retry_at = schedules.next_slot(obj.cron, db_now())
        super().save_model(request, obj, form, change)


from crawls import admin_webhooks  # noqa: E402, F401  registers Webhook and WebhookDelivery

admin.site.login_form = RateLimitedLoginForm  # failed log-ins are limited per address and user
