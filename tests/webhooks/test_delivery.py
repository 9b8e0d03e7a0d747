"""Delivering the outbox to a real receiver on 127.0.0.1, with time pinned."""

from __future__ import annotations

import datetime as dt
import random
import uuid

import pytest

from crawls.models import (
    Crawl,
    CrawlEvent,
    CrawlStatus,
    DeliveryStatus,
    StopReason,
    WebhookDelivery,
)
from runner.webhooks import Deliverer, DeliveryPolicy, deliver_due_webhooks, retry_after, signature
from tests.webhooks.delivering import drain, fast
from tests.webhooks.receivers import SECRET, T0, RecordingTransport, Reply

pytestmark = pytest.mark.django_db
S = CrawlStatus
D = DeliveryStatus


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def run_to_completion(crawl: Crawl) -> None:
    """The runner's transitions, through the model methods, one second apart."""
    Crawl.objects.filter(pk=crawl.pk).update(retry_at=at(1))
    (claim,) = Crawl.objects.filter(pk=crawl.pk).claim("runner-a", at(1), 30)
    crawl.refresh_from_db()
    assert crawl.mark_starting(claim.token, at(1))
    assert crawl.mark_running(claim.token, at(2))
    assert crawl.finish(S.COMPLETE, claim.token, at(3))


def only_delivery() -> WebhookDelivery:
    (delivery,) = WebhookDelivery.objects.all()
    return delivery


# --- transitions become signed deliveries ------------------------------------------------


def test_a_crawl_run_is_delivered_queued_started_completed_each_signed_once(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    crawl = make_crawl()
    run_to_completion(crawl)
    drain(at(10))

    assert allowed.events() == ["crawl.queued", "crawl.started", "crawl.completed"]
    assert all(r.signed for r in allowed.received)
    event_ids = [r.headers["X-Archiver-Event-Id"] for r in allowed.received]
    assert len(set(event_ids)) == 3
    assert [r.payload["event_id"] for r in allowed.received] == event_ids
    assert WebhookDelivery.objects.counts() == {"pending": 0, "delivering": 0, "succeeded": 3,
                                                "failed": 0, "total": 3}
    drain(at(1000))
    assert len(allowed.received) == 3


def test_the_request_carries_the_event_headers_and_the_crawl(allowed, make_hook, make_crawl):
    make_hook(allowed.url("/in?token=abc"))
    crawl = make_crawl()
    run_to_completion(crawl)
    drain(at(10))

    done = allowed.received[-1]
    assert done.path == "/in?token=abc"
    headers = done.headers
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Archiver-Event"] == "crawl.completed"
    assert headers["X-Archiver-Delivery"] == str(WebhookDelivery.objects.order_by("id").last().pk)
    assert headers["X-Archiver-Timestamp"] == str(int(at(10).timestamp()))
    assert headers["X-Archiver-Signature"] == signature(SECRET, headers["X-Archiver-Timestamp"], done.body)
    payload = done.payload
    assert payload["event"] == "crawl.completed"
    assert payload["timestamp"] == "2026-03-01T12:00:03Z"
    assert payload["instance"]
    assert payload["crawl"]["id"] == crawl.id
    assert payload["crawl"]["org"] == "acme"
    assert payload["crawl"]["status"] == "complete"
    assert payload["crawl"]["seeds"] == ["https://example.com/"]
    assert payload["crawl"]["started_at"] == "2026-03-01T12:00:02Z"
    assert payload["crawl"]["finished_at"] == "2026-03-01T12:00:03Z"
    assert {"pages_found", "pages_done", "pages_failed", "size_bytes", "files"} <= payload["crawl"].keys()


def test_a_stopped_crawl_says_why(allowed, make_hook, make_crawl):
    make_hook(allowed.url(), events=["crawl.stopped"])
    crawl = make_crawl()
    (claim,) = Crawl.objects.claim("runner-a", at(1), 30)
    crawl.refresh_from_db()
    crawl.mark_starting(claim.token, at(1))
    crawl.mark_running(claim.token, at(2))
    crawl.finish(S.STOPPED_TIME_LIMIT, claim.token, at(3), stop_reason=StopReason.TIME_LIMIT)
    drain(at(10))

    (stopped,) = allowed.received
    assert stopped.payload["event"] == "crawl.stopped"
    assert stopped.payload["crawl"]["stop_reason"] == "time_limit"


def test_a_webhook_hears_only_its_events_and_its_org(allowed, make_hook, make_crawl, org):
    from crawls.models import Org

    other = Org.objects.create(slug="other")
    make_hook(allowed.url("/mine"), events=["crawl.canceled"], org=org)
    make_hook(allowed.url("/theirs"), org=other)
    crawl = make_crawl()
    crawl.cancel(at(1))
    drain(at(10))

    assert [(r.path, r.payload["event"]) for r in allowed.received] == [("/mine", "crawl.canceled")]


def test_each_transition_records_its_event_once(make_hook, make_crawl):
    make_hook("https://hooks.example.com/x")
    crawl = make_crawl()
    crawl.pause(at(1))
    crawl.resume(at(2))
    run_to_completion(crawl)
    crawl.refresh_from_db()
    assert not crawl.mark_running(crawl.lease_token, at(4))  # a final crawl cannot restart

    names = list(CrawlEvent.objects.values_list("name", flat=True))
    assert names == ["crawl.queued", "crawl.paused", "crawl.resumed", "crawl.started", "crawl.completed"]
    assert WebhookDelivery.objects.count() == 5


# --- retries and final failures ----------------------------------------------------------


def test_server_errors_are_retried_with_growing_delays_until_delivered(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(500), Reply(502), Reply(503), Reply(200))
    deliverer = fast(base_delay=10)

    now, delays = at(0), []
    while True:
        assert deliver_due_webhooks("test-runner", now, deliverer)
        delivery = only_delivery()
        if delivery.status != D.PENDING:
            break
        delays.append((delivery.retry_at - now).total_seconds())
        assert not deliver_due_webhooks("test-runner", delivery.retry_at - dt.timedelta(seconds=1), deliverer)
        now = delivery.retry_at

    assert delays == [10, 20, 40]
    assert delivery.status == D.SUCCEEDED
    assert delivery.attempts == 4
    assert delivery.last_status_code == 200
    assert delivery.retry_at is None
    assert len({r.headers["X-Archiver-Event-Id"] for r in allowed.received}) == 1
    assert all(r.signed for r in allowed.received)


def test_jitter_keeps_each_delay_between_half_and_all_of_the_doubling_step():
    policy = DeliveryPolicy(base_delay=10, max_delay=100)
    rng = random.Random(7)
    for attempt, step in [(1, 10), (2, 20), (3, 40), (4, 80), (5, 100), (9, 100)]:
        for _ in range(50):
            assert step / 2 <= policy.backoff(attempt, rng) <= step


def test_a_client_error_fails_at_once_without_retry(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(400))
    drain(at(0))
    drain(at(100_000))

    delivery = only_delivery()
    assert delivery.status == D.FAILED
    assert delivery.attempts == 1
    assert delivery.last_status_code == 400
    assert delivery.retry_at is None
    assert len(allowed.received) == 1


def test_attempts_are_bounded_and_the_last_failure_is_a_dead_letter(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(*[Reply(500)] * 10)
    deliverer = fast(max_attempts=3)
    now = at(0)
    for _ in range(5):
        deliver_due_webhooks("test-runner", now, deliverer)
        now += dt.timedelta(days=1)

    delivery = only_delivery()
    assert delivery.status == D.FAILED
    assert delivery.attempts == 3
    assert "HTTP 500" in delivery.last_error and "giving up" in delivery.last_error
    assert len(allowed.received) == 3


def test_a_receiver_that_hangs_times_out_and_is_tried_again(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(hang=True), Reply(200))
    deliverer = fast(timeout=0.5, base_delay=10)

    drain(at(0), deliverer)
    delivery = only_delivery()
    assert delivery.status == D.PENDING
    assert "timed out" in delivery.last_error
    assert delivery.retry_at == at(10)

    drain(at(10), deliverer)
    assert only_delivery().status == D.SUCCEEDED
    assert len(allowed.received) == 2


def test_too_many_requests_waits_as_long_as_retry_after_says(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(429, {"Retry-After": "120"}), Reply(200))
    deliverer = fast(base_delay=10)

    drain(at(0), deliverer)
    delivery = only_delivery()
    assert delivery.status == D.PENDING
    assert delivery.last_status_code == 429
    assert delivery.retry_at == at(120)
    drain(at(119), deliverer)
    assert len(allowed.received) == 1
    drain(at(120), deliverer)
    assert only_delivery().status == D.SUCCEEDED


def test_retry_after_is_read_as_seconds_or_as_a_date():
    now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    assert retry_after("30") == 30
    assert retry_after("Sun, 01 Mar 2026 12:01:30 GMT", now) == 90
    assert retry_after("soon") is None
    assert retry_after(None) is None


def test_a_redirect_is_not_followed_and_fails_the_delivery(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(302, {"Location": "http://169.254.169.254/latest/meta-data/"}))
    drain(at(0))

    delivery = only_delivery()
    assert delivery.status == D.FAILED
    assert delivery.last_status_code == 302
    assert "redirects are not followed" in delivery.last_error
    assert len(allowed.received) == 1


def test_a_refused_connection_is_retried(allowed, make_hook, make_crawl, monkeypatch):
    from tests.ports import free_port
    from tests.webhooks.receivers import allow

    port = free_port()
    allow(monkeypatch, f"127.0.0.1:{port}")
    make_hook(f"http://127.0.0.1:{port}/hook")
    make_crawl()
    drain(at(0))

    delivery = only_delivery()
    assert delivery.status == D.PENDING
    assert delivery.last_error == f"ConnectionRefusedError (Connection refused) at 127.0.0.1:{port}"


def test_errors_and_logs_name_host_and_port_but_never_path_query_or_secret(
        allowed, make_hook, make_crawl, caplog):
    make_hook(allowed.url("/private/path?token=tok3n"))
    make_crawl()
    allowed.then(Reply(500), Reply(404))
    with caplog.at_level("DEBUG"):
        drain(at(0))
        drain(at(100_000))

    delivery = only_delivery()
    assert delivery.status == D.FAILED
    text = caplog.text + delivery.last_error
    assert allowed.where in text
    for secret in ("/private", "tok3n", SECRET):
        assert secret not in text


def test_a_refused_address_is_a_dead_letter_without_any_connection(make_hook, make_crawl):
    make_hook("http://10.0.0.7/hook")
    make_crawl()
    transport = RecordingTransport()
    drain(at(0), Deliverer(transport=transport))

    delivery = only_delivery()
    assert delivery.status == D.FAILED
    assert delivery.last_error.startswith("refused: 10.0.0.7:80")
    assert transport.sent == []


# --- leases, replay, counters ------------------------------------------------------------


def test_a_delivery_leased_by_a_live_deliverer_is_not_sent_again(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    (claim,) = WebhookDelivery.objects.open().claim("other-runner", at(0), 120)

    assert not deliver_due_webhooks("test-runner", at(60), fast())
    assert allowed.received == []
    assert deliver_due_webhooks("test-runner", at(121), fast())
    assert only_delivery().status == D.SUCCEEDED
    assert not only_delivery().succeed(claim.token, at(122), 200)  # the old lease records nothing


def test_a_deliverer_that_lost_its_lease_records_nothing(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    (old,) = WebhookDelivery.objects.open().claim("slow-runner", at(0), 120)
    delivery = only_delivery()
    assert delivery.begin_attempt(old.token)
    (new,) = WebhookDelivery.objects.open().claim("new-runner", at(200), 120)

    assert not delivery.succeed(old.token, at(201), 200)
    assert not delivery.give_up(old.token, 500, "x")
    assert only_delivery().status == D.DELIVERING
    fast().deliver(new, at(201))
    assert only_delivery().status == D.SUCCEEDED


def test_a_delivered_event_is_never_sent_again(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    drain(at(0))
    WebhookDelivery.objects.update(retry_at=at(0))  # even if something made it look due

    assert not deliver_due_webhooks("test-runner", at(10), fast())
    assert len(allowed.received) == 1


def test_a_failed_delivery_replays_with_the_same_event_id(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(410), Reply(200))
    drain(at(0))
    delivery = only_delivery()
    assert delivery.status == D.FAILED

    delivery.replay(at(50))
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.retry_at) == (D.PENDING, 0, at(50))
    drain(at(50))
    assert only_delivery().status == D.SUCCEEDED
    first, second = allowed.received
    assert first.headers["X-Archiver-Event-Id"] == second.headers["X-Archiver-Event-Id"]
    assert first.body == second.body


def test_only_a_failed_delivery_can_be_replayed(make_hook, make_crawl):
    from archiver.errors import NotAllowed

    make_hook("https://hooks.example.com/x")
    make_crawl()
    with pytest.raises(NotAllowed, match="it is pending, not failed"):
        only_delivery().replay(at(1))


def test_a_disabled_webhook_dead_letters_its_pending_deliveries(make_hook, make_crawl):
    hook = make_hook("https://hooks.example.com/x")
    make_crawl()
    hook.enabled = False
    hook.save()
    transport = RecordingTransport()
    drain(at(0), Deliverer(transport=transport))

    assert only_delivery().status == D.FAILED
    assert only_delivery().last_error == "the webhook is disabled"
    assert transport.sent == []


def test_every_delivery_ends_in_exactly_one_outcome_and_the_counts_add_up(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    for _ in range(6):
        make_crawl()
    allowed.then(Reply(200), Reply(400), Reply(500), Reply(200), Reply(500), Reply(200))
    deliverer = fast(max_attempts=2)
    drain(at(0), deliverer)

    counts = WebhookDelivery.objects.counts()
    assert counts == {"pending": 2, "delivering": 0, "succeeded": 3, "failed": 1, "total": 6}
    drain(at(100_000), deliverer)
    counts = WebhookDelivery.objects.counts()
    assert counts["pending"] + counts["delivering"] == 0
    assert counts["succeeded"] + counts["failed"] == counts["total"] == 6


def test_unique_event_ids_survive_the_payload(make_hook, make_crawl):
    make_hook("https://hooks.example.com/x")
    crawl = make_crawl()
    event = CrawlEvent.objects.get(crawl=crawl)
    assert uuid.UUID(event.payload["event_id"]) == event.event_id


def test_a_malformed_allow_setting_keeps_deliveries_pending_and_says_why(monkeypatch, make_hook, make_crawl):
    from tests.webhooks.receivers import allow

    allow(monkeypatch, "127.0.0.1")  # no port
    make_hook("https://hooks.example.com/x")
    make_crawl()
    transport = RecordingTransport()
    drain(at(0), Deliverer(transport=transport))

    delivery = only_delivery()
    assert delivery.status == D.PENDING
    assert "ARCHIVER_WEBHOOK_ALLOW_HOSTS" in delivery.last_error
    assert transport.sent == []
