"""The background dispatcher the daemon starts: delivers, wakes on demand, stops promptly.

Two threads and two processes racing are in test_crash.py, on a file database.
"""

from __future__ import annotations

import time

import pytest

from crawls.models import DeliveryStatus, WebhookDelivery
from runner.webhooks import Deliverer, DeliveryPolicy, WebhookDispatcher
from tests.waiting import HANG, wait_for
from tests.webhooks.receivers import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_dispatcher_delivers_in_the_background_and_releases_every_lease(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    for _ in range(5):
        make_crawl()
    dispatcher = WebhookDispatcher("runner-x", poll_interval=0.05).start()
    try:
        # Watch the receiver, not the database: the test database is in-memory SQLite,
        # whose shared-cache table locks fail a concurrent writer instead of waiting.
        wait_for(lambda: len(allowed.received) == 5)
    finally:
        dispatcher.stop(timeout=5)
    assert WebhookDelivery.objects.counts()["succeeded"] == 5
    ids = [r.headers["X-Archiver-Event-Id"] for r in allowed.received]
    assert len(ids) == len(set(ids)) == 5
    assert {d.lease_owner for d in WebhookDelivery.objects.all()} == {""}


def test_wake_makes_a_sleeping_dispatcher_deliver_at_once(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    dispatcher = WebhookDispatcher("runner-x", poll_interval=60).start()
    try:
        time.sleep(0.2)  # it found nothing and sleeps for a minute
        make_crawl()
        dispatcher.wake()
        wait_for(lambda: len(allowed.received) == 1)
    finally:
        dispatcher.stop(timeout=5)


def test_stop_ends_the_threads_even_while_a_receiver_hangs(allowed, make_hook, make_crawl):
    make_hook(allowed.url())
    make_crawl()
    allowed.then(Reply(hang=True))
    deliverer = Deliverer(policy=DeliveryPolicy(timeout=1.0))
    dispatcher = WebhookDispatcher("runner-x", deliverer=deliverer, poll_interval=60).start()
    assert allowed.got_request.wait(5)
    started = time.monotonic()
    dispatcher.stop(timeout=HANG)
    # The receiver never answers: the threads ended by the delivery's own timeout, and stop()
    # did not give up on them (it joined them within its timeout, and none is alive).
    assert time.monotonic() - started < HANG
    assert not any(t.is_alive() for t in dispatcher._threads)
    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.status == DeliveryStatus.PENDING and "timed out" in delivery.last_error
