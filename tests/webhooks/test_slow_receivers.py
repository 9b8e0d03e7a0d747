"""A receiver that trickles its answer a byte at a time holds its delivery no longer than the
attempt's deadline, and never delays another receiver's deliveries (runner/webhooks.py).
Against real sockets on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from crawls import ssrf
from crawls.models import DeliveryStatus, WebhookDelivery
from runner.webhooks import Deliverer, DeliveryPolicy, WebhookDispatcher, deliver_due_webhooks
from tests.waiting import HANG, wait_for
from tests.webhooks.receivers import T0, Receiver, Resolver, allow

pytestmark = pytest.mark.django_db(transaction=True)


class Trickler:
    """Reads a request, then answers one byte of a status line every `every` seconds, forever."""

    def __init__(self, every: float = 0.2, first: bytes = b""):
        self.every, self.first = every, first  # `first`: sent before the trickle
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slow"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(self.first)
            for byte in iter(lambda: b"H", None):
                if self.closed.wait(self.every):
                    return
                try:
                    conn.sendall(byte)
                except OSError:
                    return

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


@pytest.fixture
def trickler():
    server = Trickler()
    yield server
    server.close()


@pytest.fixture
def fast():
    server = Receiver()
    server.thread.start()
    yield server
    server.close()


def test_a_trickling_receiver_holds_its_attempt_only_until_the_deadline(
        monkeypatch, trickler, make_hook, make_crawl):
    allow(monkeypatch, f"127.0.0.1:{trickler.port}")
    make_hook(trickler.url())
    make_crawl()
    deliverer = Deliverer(policy=DeliveryPolicy(timeout=1.0, deadline=2.0))

    started = time.monotonic()
    assert deliver_due_webhooks("runner-x", T0, deliverer, limit=1)
    took = time.monotonic() - started

    # Each byte came well within the 1 s read timeout, and the trickle never ends: the deadline
    # ended it (its error below says so; the upper bound only tells that from a hang).
    assert 1.9 < took < HANG, took
    (delivery,) = WebhookDelivery.objects.all()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
    assert "no answer within the 2s deadline" in delivery.last_error


def test_a_slow_receiver_does_not_delay_another_receivers_deliveries(
        monkeypatch, trickler, fast, make_hook, make_crawl):
    allow(monkeypatch, f"127.0.0.1:{trickler.port}", fast.where)
    make_hook(trickler.url())
    make_hook(fast.url())
    make_crawl()
    make_crawl()  # two deliveries to each: the slow ones are the older
    # The deadline leaves a slow machine its seconds to deliver the fast ones meanwhile.
    deliverer = Deliverer(policy=DeliveryPolicy(timeout=1.0, deadline=10.0))
    dispatcher = WebhookDispatcher("runner-x", threads=2, deliverer=deliverer,
                                   poll_interval=0.05).start()
    slow = WebhookDelivery.objects.filter(webhook__url=trickler.url())
    try:
        wait_for(lambda: len(fast.received) == 2, timeout=HANG)
        # ... while the slow one trickles: its attempt is begun and has no outcome yet.
        assert list(slow.filter(attempts=1).values_list("last_error", flat=True)) == [""]
        assert trickler.connections == 1  # its second delivery waits for the first
    finally:
        dispatcher.stop(timeout=HANG)
    assert sorted(slow.values_list("attempts", flat=True)) == [0, 1]
    assert "deadline" in slow.get(attempts=1).last_error


def test_a_tls_handshake_that_trickles_ends_at_the_deadline(monkeypatch):
    # A TLS record header announcing 16 KiB of handshake, then one byte of it at a time.
    trickler = Trickler(first=b"\x16\x03\x03\x40\x00")
    try:
        settings = allow(monkeypatch, f"hooks.test:{trickler.port}")
        destination = ssrf.check_url(f"https://hooks.test:{trickler.port}/", settings,
                                     Resolver({"hooks.test": ["127.0.0.1"]}))
        started = time.monotonic()
        with pytest.raises(ssrf.DeadlineExceeded):
            ssrf.PinnedTransport().post(destination, b"{}", {}, timeout=5.0, deadline=1.5)
        assert 1.4 < time.monotonic() - started < HANG  # the deadline, not the endless trickle
    finally:
        trickler.close()


def test_a_read_timing_out_at_the_deadline_is_the_deadline_even_before_the_timer_runs(monkeypatch):
    # A busy machine: the thread that cuts the connection at the deadline has not run yet
    # when the socket's own timeout (what was left of the deadline) fires.
    class LateTimer:
        def __init__(self, *args):
            pass

        start = cancel = lambda self: None

    monkeypatch.setattr(ssrf.threading, "Timer", LateTimer)
    silent = Trickler(every=HANG, first=b"\x16\x03\x03\x40\x00")
    try:
        settings = allow(monkeypatch, f"hooks.test:{silent.port}")
        destination = ssrf.check_url(f"https://hooks.test:{silent.port}/", settings,
                                     Resolver({"hooks.test": ["127.0.0.1"]}))
        with pytest.raises(ssrf.DeadlineExceeded):
            ssrf.PinnedTransport().post(destination, b"{}", {}, timeout=5.0, deadline=0.5)
    finally:
        silent.close()
