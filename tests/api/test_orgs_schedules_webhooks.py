"""/orgs, /schedules and /webhooks through gunicorn: what `org`, `schedule` and `webhook` do."""

from __future__ import annotations

from crawls.models import (
    CrawlEvent,
    DeliveryStatus,
    Org,
    OrgUsage,
    Schedule,
    Webhook,
    WebhookDelivery,
    month_start,
)
from tests.api.servers import RECEIVER, WEBHOOK_DOMAIN


def test_orgs_list_with_quotas_and_usage(api_db, client, make_org, make_crawl):
    from django.utils import timezone

    acme = make_org("acme", storage_quota_bytes=10**10, max_concurrent_crawls=2, bytes_stored=3 * 10**9)
    OrgUsage.objects.create(org=acme, month=month_start(timezone.now()), exec_seconds=2700)
    make_crawl(org="acme")
    (out,) = [o for o in client.get("/api/v1/orgs").json() if o["slug"] == "acme"]
    assert out == {"slug": "acme", "name": "Acme", "max_concurrent_crawls": 2,
                   "storage_quota_bytes": 10**10, "exec_minutes_quota": None, "max_pages_per_crawl": None,
                   "bytes_stored": 3 * 10**9, "exec_minutes_this_month": 45.0, "active_crawls": 1}
    assert client.get("/api/v1/orgs/acme").json() == out
    assert client.get("/api/v1/orgs/nope").status_code == 404


def test_org_set_creates_then_changes_only_the_fields_given(api_db, client):
    created = client.put("/api/v1/orgs/acme", json={"name": "Acme", "storage_quota": "2GiB", "max_pages": 50})
    assert created.status_code == 201 and created.json()["message"] == "created org acme"
    updated = client.put("/api/v1/orgs/acme", json={"max_concurrent_crawls": 3, "storage_quota": None})
    assert updated.status_code == 200 and updated.json()["message"] == "updated org acme"
    org = Org.objects.get(slug="acme")
    assert (org.name, org.storage_quota_bytes, org.max_pages_per_crawl, org.max_concurrent_crawls) == \
        ("Acme", None, 50, 3)
    bad = client.put("/api/v1/orgs/acme", json={"storage_quota": "12parsecs"})
    assert bad.status_code == 422
    assert bad.json()["message"] == "storage_quota: '12parsecs' is not a size (try 500MB, 2GiB or a number of bytes)"
    assert client.put("/api/v1/orgs/acme", json={"max_pages": 0}).status_code == 422
    assert client.put("/api/v1/orgs/not%20a%20slug", json={}).status_code == 422
    org.refresh_from_db()
    assert org.max_pages_per_crawl == 50


def test_changing_quotas_needs_the_quota_right_and_an_unscoped_token(api_server, api_db, make_org, make_user,
                                                                    make_token):
    make_org("acme", max_concurrent_crawls=1)
    manager = make_user("manager", "view_org", "change_org")
    with api_server.client(make_token(manager)) as http:
        refused = http.put("/api/v1/orgs/acme", json={"max_concurrent_crawls": 50})
        assert refused.status_code == 403
        assert refused.json() == {"code": "forbidden", "message":
                                  "user 'manager' does not have the permission crawls.change_org_quotas"}
        assert http.put("/api/v1/orgs/acme", json={"name": "Acme Inc"}).status_code == 200
    with api_server.client(make_token(org="acme")) as http:  # a superuser's token, scoped to acme
        refused = http.put("/api/v1/orgs/acme", json={"storage_quota": None})
        assert refused.status_code == 403
        assert refused.json()["message"] == "a token scoped to org 'acme' cannot change its quotas"
    treasurer = make_user("treasurer", "view_org", "change_org", "change_org_quotas")
    with api_server.client(make_token(treasurer)) as http:
        assert http.put("/api/v1/orgs/acme", json={"max_concurrent_crawls": 3}).status_code == 200
    org = Org.objects.get(slug="acme")
    assert (org.name, org.max_concurrent_crawls) == ("Acme Inc", 3)


def test_schedules_are_added_listed_disabled_and_enabled(api_db, client):
    body = {"cron": "0 3 * * *", "seeds": ["https://example.com/"], "depth": 1, "tags": ["nightly"]}
    created = client.post("/api/v1/schedules", json=body)
    assert created.status_code == 201, created.text
    schedule = Schedule.objects.get()
    assert created.json()["message"].startswith(f"schedule {schedule.pk}: next run ")
    assert schedule.config["depth"] == 1 and schedule.tags == ["nightly"]
    listed = client.get("/api/v1/schedules").json()
    assert [s["id"] for s in listed] == [schedule.pk] and listed[0]["next_run"]
    off = client.post(f"/api/v1/schedules/{schedule.pk}/disable")
    assert off.json()["message"] == f"disabled schedule {schedule.pk}"
    assert client.get(f"/api/v1/schedules/{schedule.pk}").json()["enabled"] is False
    on = client.post(f"/api/v1/schedules/{schedule.pk}/enable")
    assert on.json()["message"].startswith(f"enabled schedule {schedule.pk}: next run ")
    bad = client.post("/api/v1/schedules", json={**body, "cron": "every day"})
    assert bad.status_code == 422 and "is not a valid cron expression" in bad.json()["message"]
    assert client.post("/api/v1/schedules", json={**body, "seeds": ["ftp://x/"]}).status_code == 422
    assert client.get("/api/v1/schedules/999").status_code == 404
    assert Schedule.objects.count() == 1


def test_a_schedule_watches_what_change_alerts_compare_and_bad_watches_change_nothing(api_db, client):
    body = {"cron": "0 3 * * *", "seeds": ["https://example.com/"], "watch": {"selector": "main .price"}}
    created = client.post("/api/v1/schedules", json=body)
    assert created.status_code == 201, created.text
    schedule = Schedule.objects.get()
    assert schedule.watch == {"selector": "main .price"} and schedule.watch_since is not None
    assert created.json()["schedule"]["watch"] == {"selector": "main .price"}
    for bad in ({"pages": True, "selector": "h1"}, {"urls": ["ftp://x/"]}, {"colour": "red"}, ["h1"],
                {"selector": "a[href"}):
        answer = client.post("/api/v1/schedules", json={**body, "watch": bad})
        assert answer.status_code == 422 and "watch" in answer.json()["message"], (bad, answer.text)
        answer = client.post(f"/api/v1/schedules/{schedule.pk}/watch", json=bad)
        assert answer.status_code == 422, (bad, answer.text)
    assert Schedule.objects.count() == 1 and Schedule.objects.get().watch == {"selector": "main .price"}
    urls = client.post(f"/api/v1/schedules/{schedule.pk}/watch", json={"urls": ["https://example.com/a#x"]})
    assert urls.status_code == 200 and urls.json()["schedule"]["watch"] == {"urls": ["https://example.com/a"]}
    off = client.post(f"/api/v1/schedules/{schedule.pk}/watch", json={})
    assert off.json()["message"] == f"schedule {schedule.pk} watches nothing: no change alerts"
    assert client.get(f"/api/v1/schedules/{schedule.pk}").json()["watch"] is None


def test_webhooks_are_added_with_the_runners_url_rules_listed_without_secrets_and_removed(api_db, client):
    refused = client.post("/api/v1/webhooks", json={"url": "https://10.0.0.1/hook", "secret": "s3cret"})
    assert refused.status_code == 422 and refused.json()["message"].startswith("refused: ")
    outside = client.post("/api/v1/webhooks", json={"url": "https://example.com/hook", "secret": "s3cret"})
    assert outside.status_code == 422 and WEBHOOK_DOMAIN.split(".")[0] not in outside.json()["message"][:0]
    no_secret = client.post("/api/v1/webhooks", json={"url": "https://127.0.0.1/hook", "secret": " "})
    assert no_secret.status_code == 422
    unknown = client.post("/api/v1/webhooks", json={"url": "https://10.0.0.1/", "secret": "s", "events": ["crawl.eaten"]})
    assert unknown.status_code == 422 and "unknown event 'crawl.eaten'" in unknown.json()["message"]
    assert not Webhook.objects.exists()

    hook = Webhook.objects.create(url="https://hooks.example.invalid/in?token=abc", secret="s3cret")
    listed = client.get("/api/v1/webhooks")
    assert "s3cret" not in listed.text and "abc" not in listed.text
    assert listed.json()[0]["url"] == "https://hooks.example.invalid/in?…"
    removed = client.delete(f"/api/v1/webhooks/{hook.pk}")
    assert removed.json() == {"message": f"removed webhook {hook.pk}"}
    assert client.delete(f"/api/v1/webhooks/{hook.pk}").json() == {"code": "not_found",
                                                                   "message": f"no webhook {hook.pk}"}


def test_a_failed_delivery_is_replayed_and_a_pending_one_is_refused(api_db, client, make_crawl):
    hook = Webhook.objects.create(url="https://hooks.example.invalid/in", secret="s3cret")
    make_crawl()  # its crawl.queued event is delivered to the hook
    delivery = WebhookDelivery.objects.get()
    refused = client.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/replay")
    assert refused.status_code == 409
    assert refused.json()["message"] == f"cannot replay delivery {delivery.pk}: it is pending, not failed"
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED, attempts=5, retry_at=None)
    page = client.get("/api/v1/webhooks/deliveries", params={"failed": "true"}).json()
    assert page["counts"]["failed"] == 1 and [d["id"] for d in page["items"]] == [delivery.pk]
    assert page["items"][0]["event"] == "crawl.queued" and page["items"][0]["webhook"] == hook.pk
    replayed = client.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/replay")
    assert replayed.json() == {"message": f"delivery {delivery.pk} is pending again"}
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)
    assert CrawlEvent.objects.count() == 1


def test_a_webhook_is_added_for_an_org_and_a_scoped_token_sees_only_its_orgs(api_server, api_db, client,
                                                                            make_org, make_token):
    make_org("acme")
    added = client.post("/api/v1/webhooks", json={"url": f"http://{RECEIVER}/hook?key=k", "secret": "s3cret",
                                                  "events": ["crawl.completed"], "org": "acme"})
    assert added.status_code == 201, added.text
    hook = Webhook.objects.get()
    assert added.json()["message"] == f"added webhook {hook.pk}"
    assert (hook.org.slug, hook.events, hook.secret) == ("acme", ["crawl.completed"], "s3cret")
    assert "s3cret" not in added.text
    Webhook.objects.create(url=f"http://{RECEIVER}/all", secret="x")  # every org's events
    with api_server.client(make_token(org="acme")) as scoped:
        assert [w["id"] for w in scoped.get("/api/v1/webhooks").json()] == [hook.pk]
        own = scoped.post("/api/v1/webhooks", json={"url": f"http://{RECEIVER}/mine", "secret": "s"})
        assert own.status_code == 201 and own.json()["webhook"]["org"] == "acme"
    assert Webhook.objects.filter(org__isnull=True).count() == 1
