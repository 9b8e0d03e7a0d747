"""The webhook admin: the secret is write-only, URLs pass the SSRF check, replay works."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from crawls.models import DeliveryStatus, Webhook, WebhookDelivery
from tests.webhooks.receivers import SECRET

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]


@pytest.fixture
def staff(client):
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(user)
    return client


def form(url: str, secret: str = "", events=()) -> dict:
    return {"url": url, "secret": secret, "events": list(events), "org": "", "enabled": "on"}


def test_adding_a_webhook_stores_the_secret_and_never_renders_it_back(staff, allowed):
    response = staff.post(reverse("admin:crawls_webhook_add"),
                          form(allowed.url(), SECRET, ["crawl.completed"]))
    assert response.status_code == 302, response.content.decode()[:2000]
    hook = Webhook.objects.get()
    assert (hook.secret, hook.events) == (SECRET, ["crawl.completed"])

    page = staff.get(reverse("admin:crawls_webhook_change", args=[hook.pk])).content.decode()
    assert 'type="password"' in page
    assert SECRET not in page
    listing = staff.get(reverse("admin:crawls_webhook_changelist")).content.decode()
    assert SECRET not in listing and "token=abc" not in listing


def test_saving_with_an_empty_secret_keeps_the_old_one(staff, allowed, make_hook):
    hook = make_hook(allowed.url())
    response = staff.post(reverse("admin:crawls_webhook_change", args=[hook.pk]), form(allowed.url()))
    assert response.status_code == 302
    hook.refresh_from_db()
    assert hook.secret == SECRET


@pytest.mark.parametrize(("url", "secret", "message"), [
    ("http://10.0.0.1/hook", SECRET, "private address"),
    ("https://[::1]/hook", SECRET, "loopback"),
    ("https://hooks.example.com/", "", "secret is empty"),
])
def test_a_refused_url_or_an_empty_secret_is_a_form_error_and_nothing_is_written(staff, url, secret, message,
                                                                                monkeypatch):
    monkeypatch.setattr("crawls.ssrf.system_resolver", lambda host, port: ["93.184.215.14"])
    response = staff.post(reverse("admin:crawls_webhook_add"), form(url, secret))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert Webhook.objects.count() == 0


def test_failed_deliveries_are_listed_filtered_and_replayed(staff, make_hook, make_crawl, monkeypatch):
    monkeypatch.setattr("crawls.wake.nudge", lambda: False)
    make_hook("https://hooks.example.com/x")
    make_crawl()
    make_crawl()
    failed, pending = WebhookDelivery.objects.order_by("id")
    WebhookDelivery.objects.filter(pk=failed.pk).update(status=DeliveryStatus.FAILED, attempts=8,
                                                        retry_at=None, last_status_code=500)

    url = reverse("admin:crawls_webhookdelivery_changelist")
    page = staff.get(url, {"status__exact": "failed"}).content.decode()
    assert f'value="{failed.pk}"' in page and f'value="{pending.pk}"' not in page

    response = staff.post(url, {"action": "replay", "_selected_action": [failed.pk, pending.pk]})
    assert response.status_code == 302
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == (DeliveryStatus.PENDING, 0)
    page = staff.get(url).content.decode()
    assert "1 deliveries pending again" in page
    assert "not failed" in page
