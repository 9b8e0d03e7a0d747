"""Waking the loop never blocks: a signal handler calls Runner.wake(), and a busy daemon
may not have drained its wake socket for a long time."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.django_db


def test_wake_returns_when_the_wake_socket_is_full(make_runner, fake):
    runner = make_runner(fake)
    with runner.wake_socket():
        # Nobody drains the socket, as when the daemon is inside a long tick: its queue
        # fills after a few datagrams, and a blocking send would wait for good.
        woken = threading.Event()

        def wake_many():
            for _ in range(1000):
                runner.wake()
            woken.set()

        thread = threading.Thread(target=wake_many, daemon=True)
        thread.start()
        assert woken.wait(timeout=120), "wake() blocked on a full wake socket"
        # The loop still wakes at once on the queued nudges.
        ready = threading.Event()
        threading.Thread(target=lambda: (runner.sleep(600), ready.set()), daemon=True).start()
        assert ready.wait(timeout=120), "the loop did not wake on the queued nudges"
