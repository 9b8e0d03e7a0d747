"""The admin of orgs: their quotas (changed only with `change_org_quotas`) and usage."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Count, FloatField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from crawls.admin.words import PlainTitles
from crawls.config import MAX_SIZE, human_size, parse_size
from crawls.models import CrawlStatus, Org, OrgUsage, month_start


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


def with_usage(orgs):
    """Orgs with their active crawls and this month's execution seconds, in one query
    (the org list and the home page)."""
    this_month = OrgUsage.objects.filter(org=OuterRef("pk"), month=month_start(timezone.now()))
    return orgs.annotate(
        active_count=Count("crawls", filter=Q(crawls__status__in=CrawlStatus.ACTIVE)),
        month_seconds=Coalesce(Subquery(this_month.values("exec_seconds")[:1]), Value(0.0),
                               output_field=FloatField()),
    )


@admin.register(Org)
class OrgAdmin(PlainTitles, admin.ModelAdmin):
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
        return with_usage(super().get_queryset(request))

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
