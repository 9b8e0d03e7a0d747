"""A separate process on a file SQLite db: `setup URL [CRAWLS]`, `dispatch LEASE [THREADS]`, `show`.

Runs against the database named by the ARCHIVER_* environment, like a real runner would,
so a test can kill -9 it in the middle of a delivery, or run threads on a real file
database (the test database is an in-memory one whose table locks time out differently).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")

import django  # noqa: E402

django.setup()

from crawls.config import CrawlConfig  # noqa: E402
from crawls.lease import db_now  # noqa: E402
from crawls.models import Crawl, Org, Webhook, WebhookDelivery  # noqa: E402
from runner.webhooks import Deliverer, DeliveryPolicy, WebhookDispatcher  # noqa: E402
from tests.webhooks.receivers import SECRET  # noqa: E402


def setup(url: str, crawls: str = "1") -> None:
    Webhook.objects.create(url=url, secret=SECRET)
    for _ in range(int(crawls)):
        Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=["https://example.com/"]))


def dispatch(lease_seconds: str, threads: str = "1") -> None:
    """Deliver until nothing is open any more (or for ever, if killed first)."""
    policy = DeliveryPolicy(lease_seconds=float(lease_seconds), timeout=60)
    dispatcher = WebhookDispatcher(f"worker-{os.getpid()}", deliverer=Deliverer(policy=policy),
                                   threads=int(threads), poll_interval=0.1).start()
    while WebhookDelivery.objects.open().exists():
        time.sleep(0.1)
    dispatcher.stop(timeout=5)


def show() -> None:
    rows = WebhookDelivery.objects.select_related("event").order_by("id")
    sys.stdout.write(json.dumps([
        {"id": d.pk, "status": d.status, "attempts": d.attempts, "event_id": str(d.event.event_id),
         "retry_at": d.retry_at.isoformat() if d.retry_at else None, "now": db_now().isoformat()}
        for d in rows
    ]))


if __name__ == "__main__":
    {"setup": setup, "dispatch": dispatch, "show": show}[sys.argv[1]](*sys.argv[2:])
