"""The admin of crawls and their snapshots: crawls are read-only but for their tags.

Actions and buttons call crawls.actions, as the CLI and the API do, so the admin can never
put a crawl into a state the CLI could not. The crawl's own pages (add, edit, buttons, live
JSON, downloads, replay, the log) are in crawls/admin/views.py.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.forms.models import BaseInlineFormSet
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from archiver.errors import ActionRefused
from crawls import actions, provenance
from crawls.admin.diff import diff_page
from crawls.admin.forms import TagsField
from crawls.admin.imports import import_page
from crawls.admin.pages import page_thumbnail, pages_page
from crawls.admin.qa import qa_page, qa_shot
from crawls.admin.views import (
    ACTIONS,
    BUTTONS,
    add_crawl,
    allowed_buttons,
    download,
    download_url,
    edit_crawl,
    editable,
    live,
    live_detail,
    log_page,
    may,
    press,
    replay,
)
from crawls.admin.watch import in_browser_mode, watch_frames, watch_page
from crawls.admin.words import (
    PlainTitles,
    StateFilter,
    config_html,
    group_of,
    one_line_reason,
    seeds_html,
    state_words,
)
from crawls.cli import age, duration
from crawls.config import human_size
from crawls.lease import db_now
from crawls.models import (
    Crawl,
    CrawlEvent,
    CrawlLog,
    Process,
    Snapshot,
    SnapshotStatus,
    WebhookDelivery,
    review_state,
)

INLINE_ROWS = 50  # a 100k-snapshot crawl must still render: inlines show the newest rows


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
    fields = ("url", "title", "depth", "status", "http_status", "mime", "captured_at")
    verbose_name_plural = f"snapshots (newest {INLINE_ROWS})"


class CrawlLogInline(ReadOnlyInline):
    model = CrawlLog
    fields = ("created_at", "level", "source", "message")
    verbose_name_plural = f"log lines (newest {INLINE_ROWS})"


class CrawlEventInline(ReadOnlyInline):
    model = CrawlEvent
    fields = ("created_at", "name", "event_id")
    classes = ("collapse",)  # event ids are for operators matching webhook deliveries
    verbose_name_plural = f"operator details: events (newest {INLINE_ROWS})"


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


def state_cell(crawl: Crawl):
    """The state in words, coloured by its group; live.js keeps word and colour current."""
    return format_html(
        '<span class="crawl-state state state-{}" data-crawl="{}" data-field="state" data-live-url="{}" '
        'title="{}">{}</span>',
        group_of(crawl), crawl.pk, reverse("admin:crawls_crawl_live"), crawl.status, state_words(crawl),
    )


def crawl_title(crawl: Crawl) -> str:
    """`Crawl a3281777 — example.org`: its short id and its first seed's host."""
    seeds = crawl.seeds if isinstance(crawl.seeds, list) else []
    host = urlsplit(seeds[0]).hostname if seeds and isinstance(seeds[0], str) else None
    return f"Crawl {crawl.short_id}" + (f" — {host}" if host else "")


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
    list_filter = (StateFilter, "org")
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
        "verify_archives",
    ]
    inlines = (ProcessInline, CrawlEventInline, CrawlLogInline, SnapshotInline)
    fieldsets = (
        (None, {"fields": ("state", "reason", "seed_list", "org", "tags", "error")}),
        ("Progress", {"fields": ("progress", "size", "running_time",
                                 "execution_time", "attempts", "scale", "snapshot_count")}),
        ("Archive files", {"fields": ("files_table",)}),
        ("Failed pages", {"fields": ("failed_pages",)}),
        ("Webhook deliveries", {"classes": ("collapse",), "fields": ("deliveries",)}),
        ("Configuration", {"fields": ("config_summary", "override_summary")}),
        ("Times", {"fields": ("created_at", "started_at", "paused_at", "finished_at",
                              "progress_at", "updated_at")}),
        # Internals an operator may need, folded away (a <details> in Django's admin).
        ("Operator details", {"classes": ("collapse",),
                              "fields": ("id", "status", "intent", "stop_reason", "error_detail", "retry_at",
                                         "lease_owner", "lease_token", "redis_db", "stalls")}),
    )
    # People edit tags only; state and counters change through buttons and the runner.
    readonly_fields = tuple(
        field
        for _, options in fieldsets for field in options["fields"] if field != "tags"
    )

    class Media:
        js = ["crawls/live.js"]

    def get_queryset(self, request):
        return super().get_queryset(request).with_running_processes()  # the "ran" column

    def get_urls(self):
        def view(function):
            def wrapped(request, *args, **kwargs):
                return function(self, request, *args, **kwargs)
            return self.admin_site.admin_view(wrapped)

        return [
            path("live.json", view(live), name="crawls_crawl_live"),
            path("import/", view(import_page), name="crawls_crawl_import"),
            path("<str:pk>/press/<str:button>/", view(press), name="crawls_crawl_press"),
            path("<str:pk>/files/<int:file_pk>/<str:name>", view(download),
                 name="crawls_crawl_download"),
            path("<str:pk>/replay/", view(replay), name="crawls_crawl_replay"),
            path("<str:pk>/log/", view(log_page), name="crawls_crawl_log"),
            path("<str:pk>/diff/", view(diff_page), name="crawls_crawl_diff"),
            path("<str:pk>/pages/", view(pages_page), name="crawls_crawl_pages"),
            path("<str:pk>/pages/<int:snapshot>/thumbnail", view(page_thumbnail),
                 name="crawls_crawl_page_thumbnail"),
            path("<str:pk>/watch/", view(watch_page), name="crawls_crawl_watch"),
            path("<str:pk>/watch.json", view(watch_frames), name="crawls_crawl_watch_frames"),
            path("<str:pk>/qa/", view(qa_page), name="crawls_crawl_qa"),
            path("<str:pk>/qa/<int:review>/<str:kind>.png", view(qa_shot), name="crawls_crawl_qa_shot"),
            path("<str:pk>/edit/", view(edit_crawl), name="crawls_crawl_edit"),
            *super().get_urls(),
        ]

    def add_view(self, request, form_url="", extra_context=None):
        return add_crawl(self, request)

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), "title": "Crawls"})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        crawl = Crawl.objects.filter(pk=object_id).first()
        if crawl is not None:
            extra_context = {
                **(extra_context or {}), "crawl": crawl, "title": crawl_title(crawl), "subtitle": None,
                "state_words": state_words(crawl), "state_group": group_of(crawl),
                "buttons": allowed_buttons(request, crawl),
                "may_add": may(request, "add"),
                "may_edit": may(request, "change") and editable(crawl),
                "has_files": crawl.files.exists(),
                "reviewed": crawl.page_reviews.exists(),
                "review": review_state(crawl),
                "live": live_detail(crawl, timezone.now()),
                "watchable": in_browser_mode(crawl) and not crawl.is_final,
                # Its page edits tags only: Django's "Save and add another" and "Save and
                # continue editing" would be buttons of a model form people never use here.
                "show_save_and_add_another": False, "show_save_and_continue": False,
            }
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.action(description="Verify the selected crawls' archives (hashes and signature)")
    def verify_archives(self, request, queryset):
        failed = []
        files = [f for crawl in queryset for f in provenance.crawl_files(crawl)]
        for crawl_file in files:
            if not provenance.verify_file(crawl_file).ok:
                failed.append(crawl_file.path)
        if failed:
            self.message_user(request, f"{len(failed)} of {len(files)} archive(s) do not verify: "
                              + ", ".join(failed[:5]), messages.ERROR)
        else:
            self.message_user(request, f"{len(files)} archive(s) verified", messages.SUCCESS)

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
        # Without its scheme: a narrow column shows the host, not "http://1…".
        shown = re.sub(r"^https?://", "", seeds[0])
        return format_html('<span class="crawl-seed" title="{}">{}</span>{}', "\n".join(seeds), shown, more)

    @admin.display(description="seeds")
    def seed_list(self, obj):
        return seeds_html(obj.seeds)

    @admin.display(description="configuration")
    def config_summary(self, obj):
        return config_html(obj.config)

    @admin.display(description="changed for this attempt")
    def override_summary(self, obj):
        override = obj.config_override if isinstance(obj.config_override, dict) else {}
        if not override:
            return "nothing"
        seeds = override.get("seeds")
        rest = {k: v for k, v in override.items() if k != "seeds"}
        parts = [format_html("only {} page(s): {}", len(seeds), seeds_html(seeds))] if seeds else []
        return format_html_join("", "{}", ((part,) for part in parts)) if not rest else format_html(
            "{}{}", format_html_join("", "{}", ((part,) for part in parts)),
            format_html_join("", "<p>{}: {}</p>", ((k.replace("_", " "), v) for k, v in rest.items())))

    @admin.display(description="state", ordering="status")
    def state(self, obj):
        return state_cell(obj)

    @admin.display(description="why")
    def reason(self, obj):
        return live_cell(obj, "reason", one_line_reason(obj), "crawl-reason")

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
        return live_cell(obj, "execution_time", duration(obj.exec_now(timezone.now())))

    @admin.display(description="snapshots")
    def snapshot_count(self, obj):
        url = reverse("admin:crawls_snapshot_changelist") + "?" + urlencode({"crawl__id__exact": obj.pk})
        return format_html('{} (<a href="{}">all snapshots</a>)', obj.snapshots.count(), url)

    @admin.display(description="files")
    def files_table(self, obj):
        rows = [
            (format_html('<a href="{}" class="download">{}</a>', download_url(f), f.path),
             human_size(f.size), format_html('<code>{}</code>', f.sha256), f.created_at, provenance.said(f))
            for f in obj.files.order_by("created_at")
        ]
        return table_html(("path (download)", "size", "sha256", "created", "provenance"), rows, "none yet")

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
class SnapshotAdmin(PlainTitles, admin.ModelAdmin):
    """Every snapshot of a crawl, paginated; reached from the crawl's page."""

    list_display = ("url", "title", "crawl", "depth", "status", "http_status", "captured_at")
    list_filter = ("status", "http_status", "captured_at")
    list_select_related = ("crawl",)
    search_fields = ("url", "title")
    raw_id_fields = ("crawl", "parent")
    show_full_result_count = False
    list_per_page = 100

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
