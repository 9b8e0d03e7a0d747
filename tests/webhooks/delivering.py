"""Delivering the outbox in a test: a deliverer whose delays are exact, and a drain."""

from __future__ import annotations

import datetime as dt
import random

from runner.webhooks import Deliverer, DeliveryPolicy, deliver_due_webhooks


def fast(**changes) -> Deliverer:
    """Short timeouts, and jitter that is always the largest, so delays are exact."""
    policy = DeliveryPolicy(**{"timeout": 1.0, **changes})
    rng = random.Random()
    rng.uniform = lambda low, high: high
    return Deliverer(policy=policy, rng=rng)


def drain(now: dt.datetime, deliverer: Deliverer | None = None) -> None:
    while deliver_due_webhooks("test-runner", now, deliverer or fast()):
        pass
