"""The admin renders for staff with real data, its actions go through the model, and
anonymous users are sent to the login page."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from crawls.admin import INLINE_ROWS
from crawls.config import CrawlConfig
from crawls.models import (
    Crawl,
    CrawlFile,
    CrawlLog,
    CrawlStatus,
    Org,
    OrgUsage,
    Process,
    Schedule,
    Snapshot,
)

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]


@pytest.fixture
def nudges(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    monkeypatch.setattr("crawls.wake.nudge", lambda: calls.append(True) or False)
    return calls


@pytest.fixture
def org() -> Org:
    return Org.objects.create(slug="acme", name="Acme", storage_quota_bytes=10**9,
                              exec_minutes_quota=600, bytes_stored=2 * 10**8)


@pytest.fixture
def make_crawl(org):
    def make(status=S.QUEUED, url="https://example.com/", **fields) -> Crawl:
        crawl = Crawl.create(org, CrawlConfig(seeds=[url], page_limit=100))
        Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
        crawl.refresh_from_db()
        return crawl

    return make


@pytest.fixture
def busy_crawl(make_crawl) -> Crawl:
    """A running crawl with a little of everything its change page shows."""
    now = timezone.now()
    crawl = make_crawl(S.RUNNING, started_at=now, pages_found=80, pages_done=30, size_bytes=5 * 10**6)
    Snapshot.objects.bulk_create(
        Snapshot(crawl=crawl, url=f"https://example.com/page/{n}", depth=1, http_status=200)
        for n in range(120)
    )
    Process.objects.create(crawl=crawl, instance=0, hostname="crawl-x-0", launcher="docker",
                           status="running", started_at=now)
    CrawlFile.objects.create(crawl=crawl, path=f"crawls/{crawl.id}/a.wacz", size=12345, sha256="ab" * 32)
    CrawlLog.objects.create(crawl=crawl, level="error", source="crawler-0", message="timeout on /slow")
    return crawl


def test_anonymous_users_are_sent_to_the_login_page(client, busy_crawl):
    for url in (reverse("admin:crawls_crawl_changelist"),
                reverse("admin:crawls_crawl_change", args=[busy_crawl.pk]),
                reverse("admin:crawls_org_changelist")):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_a_staff_user_without_permissions_cannot_see_crawls(client, busy_crawl):
    User.objects.create_user("clerk", password="pw-12345678", is_staff=True)
    client.login(username="clerk", password="pw-12345678")
    assert client.get(reverse("admin:crawls_crawl_changelist")).status_code == 403


def test_the_crawl_list_shows_state_progress_size_and_org(admin_client, busy_crawl, make_crawl):
    make_crawl(S.COMPLETE, url="https://other.example/")
    response = admin_client.get(reverse("admin:crawls_crawl_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert busy_crawl.short_id in html
    assert '<progress value="30" max="80"' in html
    assert "5.0 MB" in html
    assert "acme" in html
    assert "https://other.example/" in html


def test_the_crawl_list_filters_by_state_and_org_and_searches_id_prefix_and_seed(admin_client, busy_crawl, make_crawl):
    done = make_crawl(S.COMPLETE, url="https://other.example/")
    url = reverse("admin:crawls_crawl_changelist")
    by_state = admin_client.get(url, {"status__exact": S.COMPLETE}).content.decode()
    assert done.short_id in by_state and busy_crawl.short_id not in by_state
    by_org = admin_client.get(url, {"org__id__exact": busy_crawl.org_id}).content.decode()
    assert busy_crawl.short_id in by_org
    by_id = admin_client.get(url, {"q": busy_crawl.id[:10]}).content.decode()
    assert busy_crawl.short_id in by_id and done.short_id not in by_id
    by_seed = admin_client.get(url, {"q": "other.example"}).content.decode()
    assert done.short_id in by_seed and busy_crawl.short_id not in by_seed


def test_the_crawl_page_shows_config_inlines_and_only_the_newest_snapshots(admin_client, busy_crawl):
    response = admin_client.get(reverse("admin:crawls_crawl_change", args=[busy_crawl.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "page_limit" in html  # the config
    assert "crawl-x-0" in html  # processes
    assert "a.wacz" in html and "12.3 KB" in html  # files
    assert "timeout on /slow" in html  # log lines
    assert "crawl.queued" in html  # events
    assert "https://example.com/page/119" in html
    assert "https://example.com/page/0<" not in html  # older than the newest 50
    assert "120 (<a href=" in html  # the snapshot count links to the full list


def test_the_full_snapshot_list_of_a_crawl_is_paginated(admin_client, busy_crawl):
    url = reverse("admin:crawls_snapshot_changelist")
    response = admin_client.get(url, {"crawl__id__exact": busy_crawl.pk})
    assert response.status_code == 200
    assert response.content.decode().count("https://example.com/page/") == 100


class FormInputs(HTMLParser):
    """The named inputs and textareas of a page, as a browser would post them back."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, str] = {}
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("name") and attrs.get("type") not in ("submit", "checkbox"):
            self.data[attrs["name"]] = attrs.get("value") or ""
        elif tag == "textarea":
            self._textarea = attrs.get("name")
            self.data[self._textarea] = ""

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None


def form_of(page) -> dict[str, str]:
    parser = FormInputs()
    parser.feed(page.content.decode())
    return parser.data


def test_tags_are_the_only_thing_the_crawl_page_saves(admin_client, busy_crawl):
    url = reverse("admin:crawls_crawl_change", args=[busy_crawl.pk])
    form = form_of(admin_client.get(url))
    form.update({"tags": '["weekly"]', "status": "complete", "pages_done": "999"})
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    busy_crawl.refresh_from_db()
    assert busy_crawl.tags == ["weekly"]
    assert (busy_crawl.status, busy_crawl.pages_done) == (S.RUNNING, 30)


def test_crawls_cannot_be_added_or_deleted_in_the_admin(admin_client, busy_crawl):
    assert admin_client.get(reverse("admin:crawls_crawl_add")).status_code == 403
    assert admin_client.get(reverse("admin:crawls_crawl_delete", args=[busy_crawl.pk])).status_code == 403


def run_action(admin_client, action: str, *crawls):
    return admin_client.post(
        reverse("admin:crawls_crawl_changelist"),
        {"action": action, "_selected_action": [c.pk for c in crawls]},
        follow=True,
    )


def test_the_pause_action_pauses_queued_crawls_and_asks_the_runner_for_running_ones(
    admin_client, make_crawl, busy_crawl, nudges
):
    queued = make_crawl()
    response = run_action(admin_client, "pause_crawls", queued, busy_crawl)
    assert response.status_code == 200
    queued.refresh_from_db()
    busy_crawl.refresh_from_db()
    assert queued.status == S.PAUSED
    assert (busy_crawl.status, busy_crawl.intent) == (S.RUNNING, "pause")
    assert nudges == [True]


def test_an_action_reports_each_refused_crawl_and_still_handles_the_others(admin_client, make_crawl, nudges):
    done = make_crawl(S.COMPLETE)
    failed = make_crawl(S.FAILED)
    response = run_action(admin_client, "retry_crawls", done, failed)
    html = response.content.decode().lower()
    assert f"cannot retry crawl {done.short_id}: it is complete" in html
    assert "queued again: 1 crawl(s)" in html
    failed.refresh_from_db()
    done.refresh_from_db()
    assert (failed.status, failed.attempts, done.status) == (S.QUEUED, 2, S.COMPLETE)
    assert nudges == [True]


@pytest.mark.parametrize(("action", "status", "intent"), [
    ("resume_crawls", S.QUEUED, ""),
    ("stop_crawls", S.PAUSED, "stop"),
    ("cancel_crawls", S.PAUSED, "cancel"),
])
def test_resume_stop_and_cancel_actions_act_on_a_paused_crawl(admin_client, make_crawl, nudges, action, status, intent):
    crawl = make_crawl(S.PAUSED, started_at=timezone.now())
    run_action(admin_client, action, crawl)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == (status, intent)


def test_an_action_where_every_crawl_is_refused_does_not_nudge(admin_client, make_crawl, nudges):
    run_action(admin_client, "resume_crawls", make_crawl(S.COMPLETE))
    assert nudges == []


def test_the_org_list_and_page_show_usage(admin_client, org, make_crawl):
    make_crawl(S.RUNNING)
    month = timezone.now().date().replace(day=1)
    OrgUsage.objects.create(org=org, month=month, exec_seconds=90 * 60)
    html = admin_client.get(reverse("admin:crawls_org_changelist")).content.decode()
    assert "200.0 MB of 1.0 GB" in html
    assert "90 of 600" in html
    page = admin_client.get(reverse("admin:crawls_org_change", args=[org.pk]))
    assert page.status_code == 200
    assert "90 of 600" in page.content.decode()


def test_an_org_quota_is_typed_with_units_and_cleared_with_an_empty_field(admin_client, org):
    url = reverse("admin:crawls_org_change", args=[org.pk])
    form = {"slug": "acme", "name": "Acme", "storage_quota_bytes": "2GiB", "exec_minutes_quota": "",
            "max_concurrent_crawls": "3", "max_pages_per_crawl": ""}
    assert admin_client.post(url, form).status_code == 302
    org.refresh_from_db()
    assert (org.storage_quota_bytes, org.exec_minutes_quota, org.max_concurrent_crawls) == (2**31, None, 3)
    bad = admin_client.post(url, {**form, "storage_quota_bytes": "lots"})
    assert bad.status_code == 200
    assert "is not a size" in bad.content.decode()


def test_a_schedule_is_created_due_at_its_next_cron_time(admin_client, org):
    response = admin_client.post(reverse("admin:crawls_schedule_add"), {
        "org": org.pk, "cron": "0 3 * * *", "config": '{"seeds": ["https://example.com/"]}',
        "tags": "[]", "enabled": "on",
    })
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule = Schedule.objects.get()
    assert schedule.config["scope_type"] == "prefix"  # validated and filled in
    assert schedule.retry_at > timezone.now()
    assert (schedule.retry_at.hour, schedule.retry_at.minute) == (3, 0)
    assert admin_client.get(reverse("admin:crawls_schedule_changelist")).status_code == 200


def test_a_schedule_with_a_bad_cron_or_config_is_refused(admin_client, org):
    response = admin_client.post(reverse("admin:crawls_schedule_add"), {
        "org": org.pk, "cron": "every day", "config": '{"seeds": ["ftp://x"]}', "tags": "[]",
    })
    html = response.content.decode()
    assert response.status_code == 200
    assert "is not a valid cron expression" in html
    assert "only http:// and https://" in html
    assert not Schedule.objects.exists()


def add_snapshots(crawl: Crawl, count: int) -> None:
    """Insert `count` snapshot rows in one statement (bulk_create of 100k takes seconds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %s) "
            "INSERT INTO crawls_snapshot (crawl_id, url, depth, seed, status, title, mime, "
            "filename, error, created_at, lease_owner, lease_token) "
            "SELECT %s, 'https://example.com/n/' || i, 1, %s, 'done', '', '', '', '', %s, '', 0 FROM n",
            [count, crawl.pk, False, timezone.now()],
        )


def test_a_crawl_with_100k_snapshots_still_renders_quickly(admin_client, make_crawl, django_assert_max_num_queries):
    crawl = make_crawl(S.RUNNING)
    add_snapshots(crawl, 100_000)
    assert crawl.snapshots.count() == 100_000
    started = time.monotonic()
    with django_assert_max_num_queries(40):
        response = admin_client.get(reverse("admin:crawls_crawl_change", args=[crawl.pk]))
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    shown = set(re.findall(r"https://example\.com/n/\d+", response.content.decode()))
    assert len(shown) == INLINE_ROWS
    assert "https://example.com/n/99999" in shown
    assert elapsed < 5, f"the change page took {elapsed:.1f}s"


# --- permissions (issue 10 §6) -------------------------------------------------------------


@pytest.fixture
def viewer_client(client):
    """A staff user who may look at everything and change nothing."""
    from django.contrib.auth.models import Permission

    viewer = User.objects.create_user("viewer", password="a-long-passphrase-1", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    client.force_login(viewer)
    return client


@pytest.mark.parametrize("action", ["pause_crawls", "resume_crawls", "stop_crawls", "cancel_crawls",
                                    "retry_crawls"])
def test_a_view_only_user_can_run_no_crawl_action(viewer_client, make_crawl, nudges, action):
    crawls = [make_crawl(status) for status in (S.QUEUED, S.PAUSED, S.FAILED)]
    before = [(c.status, c.intent, c.attempts) for c in crawls]
    page = viewer_client.get(reverse("admin:crawls_crawl_changelist"))
    assert page.status_code == 200
    assert f'value="{action}"' not in page.content.decode()  # not offered
    response = run_action(viewer_client, action, *crawls)
    assert response.status_code in (200, 403)
    for crawl in crawls:
        crawl.refresh_from_db()
    assert [(c.status, c.intent, c.attempts) for c in crawls] == before
    assert nudges == []


def test_changing_crawls_does_not_allow_canceling_them(client, make_crawl, nudges):
    from django.contrib.auth.models import Permission

    clerk = User.objects.create_user("clerk", password="a-long-passphrase-1", is_staff=True)
    clerk.user_permissions.set(Permission.objects.filter(codename__in=["view_crawl", "change_crawl"]))
    client.force_login(clerk)
    crawl = make_crawl(S.PAUSED, started_at=timezone.now())
    run_action(client, "cancel_crawls", crawl)
    crawl.refresh_from_db()
    assert crawl.intent == ""
    run_action(client, "stop_crawls", crawl)
    crawl.refresh_from_db()
    assert crawl.intent == "stop"


def test_a_view_only_user_cannot_edit_tags(viewer_client, busy_crawl):
    url = reverse("admin:crawls_crawl_change", args=[busy_crawl.pk])
    response = viewer_client.post(url, {"tags": '["x"]'})
    assert response.status_code == 403
    busy_crawl.refresh_from_db()
    assert busy_crawl.tags == []


def test_a_view_only_user_cannot_replay_a_failed_delivery(viewer_client, busy_crawl, nudges):
    from crawls.models import DeliveryStatus, Webhook, WebhookDelivery

    hook = Webhook.objects.create(url="https://hooks.example/x", secret="s" * 20)
    delivery = WebhookDelivery.objects.create(webhook=hook, event=busy_crawl.events.get(),
                                              status=DeliveryStatus.FAILED)
    url = reverse("admin:crawls_webhookdelivery_changelist")
    assert 'value="replay"' not in viewer_client.get(url).content.decode()
    viewer_client.post(url, {"action": "replay", "_selected_action": [delivery.pk]})
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert nudges == []


def test_a_superuser_still_replays_a_failed_delivery(admin_client, busy_crawl, nudges):
    from crawls.models import DeliveryStatus, Webhook, WebhookDelivery

    hook = Webhook.objects.create(url="https://hooks.example/x", secret="s" * 20)
    delivery = WebhookDelivery.objects.create(webhook=hook, event=busy_crawl.events.get(),
                                              status=DeliveryStatus.FAILED)
    admin_client.post(reverse("admin:crawls_webhookdelivery_changelist"),
                      {"action": "replay", "_selected_action": [delivery.pk]})
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING


def test_adding_a_schedule_needs_the_right_to_add_crawls(client, org):
    from django.contrib.auth.models import Permission

    planner = User.objects.create_user("planner", password="a-long-passphrase-1", is_staff=True)
    planner.user_permissions.set(Permission.objects.filter(codename__endswith="_schedule"))
    client.force_login(planner)
    form = {"org": org.pk, "cron": "0 3 * * *", "config": '{"seeds": ["https://example.com/"]}',
            "tags": "[]", "enabled": "on"}
    assert client.post(reverse("admin:crawls_schedule_add"), form).status_code == 403
    assert not Schedule.objects.exists()


# --- log-in ----------------------------------------------------------------------------------


def log_in(client, password: str):
    return client.post(reverse("admin:login"), {"username": "boss", "password": password,
                                                "next": "/admin/"})


def test_repeated_failed_log_ins_lock_the_user_out_from_that_address(client):
    from crawls.admin_login import MAX_FAILURES

    User.objects.create_user("boss", password="the-right-passphrase", is_staff=True)
    for _ in range(MAX_FAILURES):
        assert log_in(client, "wrong guess").status_code == 200
    refused = log_in(client, "the-right-passphrase")
    assert refused.status_code == 200
    assert "Too many failed log-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_successful_log_in_clears_earlier_failures(client):
    from crawls.admin_login import MAX_FAILURES
    from crawls.models import LoginFailure

    User.objects.create_user("boss", password="the-right-passphrase", is_staff=True)
    for _ in range(MAX_FAILURES - 1):
        log_in(client, "wrong guess")
    assert log_in(client, "the-right-passphrase").status_code == 302
    assert not LoginFailure.objects.exists()


def test_the_lock_out_ends_after_its_time(client):
    import datetime as dt

    from crawls.admin_login import MAX_FAILURES
    from crawls.models import LoginFailure

    User.objects.create_user("boss", password="the-right-passphrase", is_staff=True)
    for _ in range(MAX_FAILURES):
        log_in(client, "wrong guess")
    LoginFailure.objects.update(locked_until=timezone.now() - dt.timedelta(seconds=1),
                                first_at=timezone.now() - dt.timedelta(hours=1))
    assert log_in(client, "the-right-passphrase").status_code == 302


@pytest.mark.parametrize("password", ["short-pw", "123456789012345", "password1234", "boss-boss-boss"])
def test_weak_passwords_are_refused(password):
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        validate_password(password, User(username="boss-boss-boss"))
