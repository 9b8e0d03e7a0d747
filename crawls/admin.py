"""The admin: crawls (mostly read-only, with the same actions as the CLI), orgs and schedules.

Actions and buttons call crawls.actions, as the CLI and the API do, so the admin can never
put a crawl into a state the CLI could not. Webhooks are registered by their own module.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Count, FloatField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.forms.models import BaseInlineFormSet
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from archiver.errors import ActionRefused
from crawls import actions, admin_views, schedules
from crawls.admin_forms import BROWSER_FIELDS, ScheduleForm, TagsField, next_runs
from crawls.admin_login import RateLimitedLoginForm
from crawls.admin_views import ACTIONS, BUTTONS, may
from crawls.cli import age, duration
from crawls.config import MAX_SIZE, human_size, parse_size
from crawls.lease import db_now
from crawls.models import (
    ApiToken,
    Crawl,
    CrawlEvent,
    CrawlLog,
    CrawlStatus,
    Org,
    OrgUsage,
    Process,
    Schedule,
    Snapshot,
    SnapshotStatus,
    WebhookDelivery,
    first_text,
    month_start,
)
from crawls.reasons import reason_line

INLINE_ROWS = 50  # a 100k-snapshot crawl must still render: inlines show the newest rows


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
              "pages", "size", "started_at", "ended_at")

    @admin.display(description="pages done")
    def pages(self, obj: Process) -> str:
        return obj.counts_shown()[0]

    @admin.display(description="size")
    def size(self, obj: Process) -> str:
        return obj.counts_shown()[1]


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


def crawl_action(method: str, done: str):
    """An admin action carrying out one of crawls.actions on each selected crawl."""
    permission = BUTTONS[method][1]

    def action(modeladmin, request, queryset):
        if not may(request, permission):  # also hidden from the menu; a forged POST ends here
            raise PermissionDenied
        now = db_now()
        succeeded = 0
        with actions.one_nudge():
            for crawl in queryset.select_related("org"):
                try:
                    ACTIONS[method](crawl, now)
                except ActionRefused as exc:
                    modeladmin.message_user(request, str(exc), messages.WARNING)
                else:
                    succeeded += 1
        if succeeded:
            modeladmin.message_user(request, f"{done}: {succeeded} crawl(s)", messages.SUCCESS)

    action.__name__ = f"{method}_crawls"
    return admin.action(description=f"{method.capitalize()} selected crawls",
                        permissions=[permission])(action)


def live_cell(crawl: Crawl, field: str, text: str, css: str = ""):
    """A list or detail cell that crawls/static/crawls/live.js refreshes."""
    return format_html(
        '<span class="{}" data-crawl="{}" data-field="{}" data-live-url="{}" title="{}">{}</span>',
        css, crawl.pk, field, reverse("admin:crawls_crawl_live"), text, text,
    )


def progress_cell(crawl: Crawl):
    failed = f", {crawl.pages_failed} failed" if crawl.pages_failed else ""
    return format_html(
        '<span class="crawl-progress" data-crawl="{}" data-field="progress" data-live-url="{}">'
        '<progress value="{}" max="{}" style="width:7em"></progress>'
        '<span class="counts">{}/{}{}</span></span>',
        crawl.pk, reverse("admin:crawls_crawl_live"), crawl.pages_done, max(crawl.pages_found, 1),
        crawl.pages_done, crawl.pages_found, failed,
    )


def table_html(headers, rows, empty: str):
    """A small read-only table for the crawl page (values are escaped)."""
    if not rows:
        return format_html('<span class="quiet">{}</span>', empty)
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join("", "<tr>{}</tr>", (
        (format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows
    ))
    return format_html('<table class="crawl-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
                       head, body)


class CrawlTagsForm(forms.ModelForm):
    """The one thing people edit on a crawl's page: its tags, typed as `weekly, news`."""

    tags = TagsField(help_text="Comma-separated, for example: weekly, news.")

    class Meta:
        model = Crawl
        fields = ("tags",)


@admin.register(Crawl)
class CrawlAdmin(admin.ModelAdmin):
    form = CrawlTagsForm
    # Fits a 1,400 px window beside the filters, the navigation sidebar closed (docs/admin.md):
    # the org is a filter, not a column.
    list_display = ("short_id", "first_seed", "state", "reason", "progress", "size",
                    "running_time", "age")
    list_filter = ("status", "org")
    list_select_related = ("org",)
    search_fields = ("^id", "seeds")
    ordering = ("-created_at",)
    show_full_result_count = False
    change_form_template = "admin/crawls/crawl/change_form.html"
    actions = [
        crawl_action("pause", "pause done or requested"),
        crawl_action("resume", "resumed"),
        crawl_action("stop", "stop done or requested"),
        crawl_action("cancel", "cancel done or requested"),
        crawl_action("retry", "queued again"),
    ]
    inlines = (ProcessInline, CrawlEventInline, CrawlLogInline, SnapshotInline)
    fieldsets = (
        (None, {"fields": ("id", "org", "seeds", "tags", "state", "stop_reason",
                           "reason", "error")}),
        ("Progress", {"fields": ("progress", "size", "running_time",
                                 "execution_time", "attempts", "scale", "snapshot_count")}),
        ("Archive files", {"fields": ("files_table",)}),
        ("Failed pages", {"fields": ("failed_pages",)}),
        ("Webhook deliveries", {"classes": ("collapse",), "fields": ("deliveries",)}),
        ("Configuration", {"fields": ("config", "config_override")}),
        ("Times", {"fields": ("created_at", "started_at", "paused_at", "finished_at",
                              "progress_at", "updated_at")}),
        ("Lease", {"classes": ("collapse",),
                   "fields": ("retry_at", "lease_owner", "lease_token", "redis_db", "stalls")}),
    )
    # People edit tags only; state and counters change through buttons and the runner.
    readonly_fields = tuple(
        field
        for _, options in fieldsets for field in options["fields"] if field != "tags"
    )

    class Media:
        css = {"all": ["crawls/admin.css"]}
        js = ["crawls/live.js"]

    def get_queryset(self, request):
        return super().get_queryset(request).with_running_processes()  # the "ran" column

    def get_urls(self):
        def view(function):
            def wrapped(request, *args, **kwargs):
                return function(self, request, *args, **kwargs)
            return self.admin_site.admin_view(wrapped)

        return [
            path("live.json", view(admin_views.live), name="crawls_crawl_live"),
            path("<str:pk>/press/<str:button>/", view(admin_views.press), name="crawls_crawl_press"),
            path("<str:pk>/files/<int:file_pk>/<str:name>", view(admin_views.download),
                 name="crawls_crawl_download"),
            path("<str:pk>/replay/", view(admin_views.replay), name="crawls_crawl_replay"),
            path("<str:pk>/log/", view(admin_views.log_page), name="crawls_crawl_log"),
            path("<str:pk>/edit/", view(admin_views.edit_crawl), name="crawls_crawl_edit"),
            *super().get_urls(),
        ]

    def add_view(self, request, form_url="", extra_context=None):
        return admin_views.add_crawl(self, request)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        crawl = Crawl.objects.filter(pk=object_id).first()
        if crawl is not None:
            extra_context = {
                **(extra_context or {}), "crawl": crawl,
                "buttons": admin_views.allowed_buttons(request, crawl),
                "may_add": may(request, "add"),
                "may_edit": may(request, "change") and admin_views.editable(crawl),
                "has_files": crawl.files.exists(),
                "live": admin_views.live_detail(crawl, timezone.now()),
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def has_add_permission(self, request):
        return may(request, "add")

    def has_delete_permission(self, request, obj=None):
        # Django's own delete page would list every snapshot and leave the files behind;
        # a crawl is deleted with its files by its "delete" button.
        return False

    def has_remove_permission(self, request, obj=None):
        """Cancel (which discards files) and delete: the right to delete crawls."""
        return may(request, "remove")

    @admin.display(description="id", ordering="id")
    def short_id(self, obj):
        return obj.short_id

    @admin.display(description="seed")
    def first_seed(self, obj):
        seeds = [seed for seed in obj.seeds if isinstance(seed, str)] if isinstance(obj.seeds, list) else []
        if not seeds:
            return "-"
        more = f" (+{len(seeds) - 1})" if len(seeds) > 1 else ""
        return format_html('<span class="crawl-seed" title="{}">{}</span>{}', "\n".join(seeds), seeds[0], more)

    @admin.display(description="state", ordering="status")
    def state(self, obj):
        text = obj.status + (f" ({obj.intent} requested)" if obj.intent else "")
        return live_cell(obj, "state", text, "crawl-state")

    @admin.display(description="reason")
    def reason(self, obj):
        return live_cell(obj, "reason", reason_line(obj), "crawl-reason")

    @admin.display(description="pages")
    def progress(self, obj):
        return progress_cell(obj)

    @admin.display(description="size", ordering="size_bytes")
    def size(self, obj):
        return live_cell(obj, "size", human_size(obj.size_bytes))

    @admin.display(description="age", ordering="created_at")
    def age(self, obj):
        return live_cell(obj, "age", age(obj.created_at, timezone.now()))

    @admin.display(description="ran")
    def running_time(self, obj):
        return live_cell(obj, "running_time", duration(obj.elapsed_now(timezone.now())))

    @admin.display(description="execution time")
    def execution_time(self, obj):
        return duration(obj.exec_seconds)

    @admin.display(description="snapshots")
    def snapshot_count(self, obj):
        url = reverse("admin:crawls_snapshot_changelist") + "?" + urlencode({"crawl__id__exact": obj.pk})
        return format_html('{} (<a href="{}">all snapshots</a>)', obj.snapshots.count(), url)

    @admin.display(description="files")
    def files_table(self, obj):
        rows = [
            (format_html('<a href="{}" class="download">{}</a>', admin_views.download_url(f), f.path),
             human_size(f.size), format_html('<code>{}</code>', f.sha256), f.created_at)
            for f in obj.files.order_by("created_at")
        ]
        return table_html(("path (download)", "size", "sha256", "created"), rows, "none yet")

    @admin.display(description=f"failed pages (newest {INLINE_ROWS})")
    def failed_pages(self, obj):
        pages = obj.snapshots.filter(status=SnapshotStatus.FAILED).order_by("-id")[:INLINE_ROWS]
        rows = [(p.url, p.http_status or "-", p.error or "-") for p in pages]
        return table_html(("URL", "HTTP", "error"), rows, "none")

    @admin.display(description=f"deliveries (newest {INLINE_ROWS})")
    def deliveries(self, obj):
        shown = WebhookDelivery.objects.filter(event__crawl=obj).select_related("event").order_by("-id")
        rows = [(d.event.name, d.webhook_id, d.status, d.attempts, d.last_status_code or "-",
                 d.last_error or "-") for d in shown[:INLINE_ROWS]]
        return table_html(("event", "webhook", "status", "attempts", "last HTTP status", "last error"),
                          rows, "none")


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

    def get_readonly_fields(self, request, obj=None):
        """Quotas are shown to everyone and changed only with the right `change_org_quotas`."""
        if request.user.has_perm("crawls.change_org_quotas"):
            return self.readonly_fields
        return (*self.readonly_fields, *Org.QUOTA_FIELDS)

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


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
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
                              "scale", "user_agent", "use_robots")}),
        ("Browser (browsertrix-crawler only)", {"fields": BROWSER_FIELDS, "classes": ("collapse",)}),
        ("State", {"fields": ("retry_at", "last_crawl", "created_at")}),
    )

    class Media:
        css = {"all": ["crawls/admin.css"]}
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


from crawls import admin_webhooks  # noqa: E402, F401  registers Webhook and WebhookDelivery

admin.site.login_form = RateLimitedLoginForm  # failed log-ins are limited per address and user



@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """API tokens: the secret is shown once, in the message after adding; revoke is an action."""

    list_display = ("prefix", "name", "user", "org", "read_only", "rate_limit", "last_used_at", "revoked_at")
    list_filter = ("read_only", "org")
    list_select_related = ("user", "org")
    actions = ["revoke_tokens"]

    def get_queryset(self, request):
        """Superusers see every token; anyone else only their own."""
        tokens = super().get_queryset(request)
        return tokens if request.user.is_superuser else tokens.filter(user=request.user)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # A token carries its user's permissions: only a superuser (who has them all
        # already) may make one for someone else. The narrowed choices also refuse a
        # forged POST naming another user ("Select a valid choice").
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = User.objects.filter(pk=request.user.pk)
            kwargs["initial"] = request.user.pk
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request, obj=None):
        editable = ["user", "name", "org", "read_only", "rate_limit"]
        return editable if obj is None else [*editable, "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", "prefix", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request, obj, form, change):
        if not change and obj.user_id != request.user.pk and not request.user.is_superuser:
            raise PermissionDenied("only a superuser creates tokens for other users")
        secret = None if change else obj.new_secret()
        super().save_model(request, obj, form, change)
        if secret:
            messages.warning(request, f"Token {obj.prefix}: {secret} (copy it now; it is not shown again)")

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=db_now())
        messages.info(request, f"revoked {revoked} token(s)")
