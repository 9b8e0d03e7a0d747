"""The admin for webhooks and their deliveries. Imported by crawls/admin/__init__.py.

A webhook's URL goes through the same SSRF check as `archiver webhook add`; its secret
is write-only (a password input that never renders the stored value; left empty on
change it keeps the old one). Deliveries are read-only, with a replay action for dead
letters that calls crawls.actions.replay_delivery, as `archiver webhook replay` does.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied

from archiver.errors import ActionRefused, ConfigError, WebhookRefused
from crawls import ssrf
from crawls.actions import one_nudge, replay_delivery
from crawls.admin.words import PlainTitles, cut
from crawls.lease import db_now
from crawls.models import CrawlEvent, DeliveryStatus, Webhook, WebhookDelivery
from crawls.webhooks import InvalidWebhook, clean_secret, shown_url


class WebhookForm(forms.ModelForm):
    # Not a URLField: ssrf.check_url is the stricter judge, and speaks in host:port only.
    url = forms.CharField(max_length=2000, widget=forms.URLInput(attrs={"size": 80}))
    secret = forms.CharField(
        required=False, strip=False, widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: receivers verify signatures with it. Leave empty to keep the current one.",
    )
    events = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple,
        choices=[(name, name) for name in CrawlEvent.NAMES], help_text="None checked = every event.",
    )

    class Meta:
        model = Webhook
        fields = ["url", "secret", "events", "org", "enabled"]

    def clean_url(self):
        url = self.cleaned_data["url"]
        try:
            ssrf.check_url(url)
        except (WebhookRefused, ConfigError, OSError) as exc:  # OSError: the name does not resolve
            raise forms.ValidationError(str(exc)) from None
        return url

    def clean_secret(self):
        secret = self.cleaned_data["secret"]
        if not secret and self.instance.pk:
            return self.instance.secret
        try:
            return clean_secret(secret)
        except InvalidWebhook as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Webhook)
class WebhookAdmin(PlainTitles, admin.ModelAdmin):
    form = WebhookForm
    list_display = ("id", "shown_url", "event_names", "org", "enabled", "pending", "failed")
    list_filter = ("enabled", "org")
    list_select_related = ("org",)

    @admin.display(description="URL")
    def shown_url(self, obj):
        return shown_url(obj.url)

    @admin.display(description="events")
    def event_names(self, obj):
        return ", ".join(obj.events) or "all"

    def pending(self, obj):
        return obj.deliveries.open().count()

    def failed(self, obj):
        return obj.deliveries.filter(status=DeliveryStatus.FAILED).count()


@admin.action(description="Replay the selected failed deliveries", permissions=["replay"])
def replay(modeladmin, request, queryset):
    if not modeladmin.has_replay_permission(request):  # a forged POST ends here
        raise PermissionDenied
    now = db_now()
    replayed = 0
    with one_nudge():
        for delivery in queryset:
            try:
                replay_delivery(delivery, now)
                replayed += 1
            except ActionRefused as exc:
                modeladmin.message_user(request, str(exc), messages.WARNING)
    if replayed:
        modeladmin.message_user(request, f"{replayed} deliveries pending again")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(PlainTitles, admin.ModelAdmin):
    list_display = ("id", "shown_webhook", "event_name", "crawl", "status", "attempts", "last_status_code",
                    "retry_at", "delivered_at", "shown_error")
    list_filter = ("status", "webhook")
    list_select_related = ("webhook", "event")
    actions = [replay]
    readonly_fields = ("webhook", "event", "event_id", "status", "attempts", "last_status_code",
                       "last_error", "retry_at", "lease_owner", "created_at", "delivered_at")
    fields = readonly_fields

    @admin.display(description="webhook", ordering="webhook")
    def shown_webhook(self, obj):
        return cut(obj.webhook)

    @admin.display(description="last error")
    def shown_error(self, obj):
        return cut(obj.last_error)

    @admin.display(description="event")
    def event_name(self, obj):
        return obj.event.name

    @admin.display(description="event id")
    def event_id(self, obj):
        return obj.event.event_id

    @admin.display(description="crawl")
    def crawl(self, obj):
        return obj.event.crawl_id[:8]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_replay_permission(self, request):
        # Deliveries are read-only rows; replaying one changes it, so it needs the right to.
        return request.user.has_perm("crawls.change_webhookdelivery")
