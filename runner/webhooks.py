"""Delivering the webhook outbox: claim due deliveries, POST them signed, record the outcome.

Events and their deliveries are written by the models in the same transaction as the
crawl transition they describe, so nothing here can lose or invent one. A deliverer
claims one delivery at a time through the lease (retry_at moves to the lease's expiry),
counts the attempt, sends, and records the outcome with its lease token: a deliverer
whose lease was taken over records nothing. A delivery cut short by a crash becomes due
again when its lease expires and is sent again with the same event id, which receivers
use to drop duplicates.

An attempt has an overall deadline (`DeliveryPolicy.deadline`: connect, TLS, request and
reply together), so a receiver that trickles its answer a byte at a time cannot hold a
delivery longer. The dispatcher delivers from a few threads, at most one delivery in flight
per receiver (host:port) in this runner (`Receivers`), so a slow receiver only slows its own
deliveries, never another org's.

Outcomes: 2xx succeeded; 5xx, 429 (Retry-After honoured), timeouts and transport errors
are tried again after an exponential, jittered delay until `max_attempts`; a 3xx (never
followed), any other 4xx, a refused address or exhausted attempts dead-letter it as
`failed`, from where `replay` starts it over. Logs and stored errors name only host:port.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import hmac
import http.client
import json
import logging
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from archiver import conf
from archiver.errors import ConfigError, WebhookRefused
from crawls import ssrf
from crawls.lease import Claim, db_now
from crawls.models import Webhook, WebhookDelivery
from runner.polling import PollingThreads

log = logging.getLogger(__name__)

USER_AGENT = f"archiver-webhooks/{conf.CRAWLER_VERSION}"


class Transport(Protocol):
    """Sends one POST to a checked destination (ssrf.PinnedTransport, or a test double)."""

    def post(self, destination: ssrf.Destination, body: bytes, headers: dict[str, str],
             timeout: float, deadline: float | None = None) -> ssrf.Response: ...


@dataclass(frozen=True)
class DeliveryPolicy:
    """How hard to try. The lease outlasts a whole attempt, so nobody else sends meanwhile."""

    max_attempts: int = 8
    base_delay: float = 30.0  # seconds before the second attempt; doubles each time
    max_delay: float = 3600.0
    max_retry_after: float = 6 * 3600.0  # a receiver's Retry-After is honoured up to this
    timeout: float = 10.0  # per connect and per read
    deadline: float = 30.0  # the whole attempt: connect, TLS, request and reply
    lease_seconds: float = 120.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Delay after failed attempt number `attempt` (1-based): in [d/2, d], d doubling.

        Half of it is jitter, so receivers recovering from an outage are not hit by every
        delivery at once, and the next delay is never shorter than this one.
        """
        delay = min(self.base_delay * 2 ** (attempt - 1), self.max_delay)
        return delay / 2 + rng.uniform(0, delay / 2)


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to. `retry` is None for final outcomes."""

    succeeded: bool
    status_code: int | None = None
    error: str = ""
    retry: bool = False
    retry_after: float | None = None


@dataclass
class Deliverer:
    """Everything an attempt needs, injectable so tests pin time and never leave 127.0.0.1."""

    policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    transport: Transport = field(default_factory=ssrf.PinnedTransport)
    resolver: ssrf.Resolver | None = None
    rng: random.Random = field(default_factory=random.Random)

    def deliver(self, claim: Claim, now: dt.datetime) -> None:
        """One attempt of a claimed delivery, its outcome recorded under our lease."""
        delivery = WebhookDelivery.objects.select_related("webhook", "event").filter(pk=claim.pk).first()
        if delivery is None:
            return  # its webhook was removed meanwhile
        hook = delivery.webhook
        if not hook.enabled:
            delivery.give_up(claim.token, None, "the webhook is disabled")
            return
        if delivery.attempts >= self.policy.max_attempts:
            delivery.give_up(claim.token, delivery.last_status_code,
                             f"gave up after {delivery.attempts} attempts (the last was interrupted)")
            return
        if not delivery.begin_attempt(claim.token):
            return  # our lease was taken over in between: hands off
        outcome = self.attempt(delivery, now)
        self.record(delivery, claim.token, outcome, now)

    def attempt(self, delivery: WebhookDelivery, now: dt.datetime) -> Outcome:
        hook = delivery.webhook
        try:
            destination = ssrf.check_url(hook.url, conf.get(), self.resolver)
        except WebhookRefused as exc:
            return Outcome(False, error=f"refused: {exc}")
        except (OSError, ConfigError) as exc:  # DNS down, or an allow setting to be fixed
            return Outcome(False, error=str(exc), retry=True)
        body, headers = signed_request(delivery, hook.secret, now)
        try:
            response = self.transport.post(destination, body, headers, self.policy.timeout,
                                           deadline=self.policy.deadline)
        except ssrf.DeadlineExceeded:
            return Outcome(False, error=f"no answer within the {self.policy.deadline:g}s deadline "
                                        f"at {destination.where}", retry=True)
        except TimeoutError:
            return Outcome(False, error=f"timed out after {self.policy.timeout:g}s at {destination.where}",
                           retry=True)
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, TLS, bad reply: may pass
            return Outcome(False, error=f"{transport_error(exc)} at {destination.where}", retry=True)
        return judge(response, destination.where)

    def record(self, delivery: WebhookDelivery, token: int, outcome: Outcome, now: dt.datetime) -> None:
        where = ssrf_where(delivery.webhook.url)
        name, number = delivery.event.name, delivery.attempts
        if outcome.succeeded:
            delivery.succeed(token, now, outcome.status_code)
            log.info("webhook %s: delivered %s (delivery %s) to %s, attempt %d",
                     delivery.webhook_id, name, delivery.pk, where, number)
        elif outcome.retry and number < self.policy.max_attempts:
            delay = self.policy.backoff(number, self.rng)
            if outcome.retry_after is not None:
                delay = max(delay, min(outcome.retry_after, self.policy.max_retry_after))
            delivery.retry_later(token, now + dt.timedelta(seconds=delay), outcome.status_code,
                                 outcome.error)
            log.warning("webhook %s: %s (delivery %s) attempt %d failed: %s; next in %.0fs",
                        delivery.webhook_id, name, delivery.pk, number, outcome.error, delay)
        else:
            error = outcome.error if not outcome.retry else f"{outcome.error} (attempt {number}, giving up)"
            delivery.give_up(token, outcome.status_code, error)
            log.error("webhook %s: %s (delivery %s) failed for good: %s",
                      delivery.webhook_id, name, delivery.pk, error)


def judge(response: ssrf.Response, where: str) -> Outcome:
    code = response.status
    if 200 <= code < 300:
        return Outcome(True, code)
    if 300 <= code < 400:
        return Outcome(False, code, f"HTTP {code} from {where}: redirects are not followed")
    if code == 429:
        return Outcome(False, code, f"HTTP 429 from {where}", retry=True,
                       retry_after=retry_after(response.headers.get("retry-after")))
    if code >= 500:
        return Outcome(False, code, f"HTTP {code} from {where}", retry=True)
    return Outcome(False, code, f"HTTP {code} from {where}")


def retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max((when - (now or dt.datetime.now(dt.UTC))).total_seconds(), 0.0)


def transport_error(exc: OSError | http.client.HTTPException) -> str:
    """A transport error in words, without anything it may quote from the URL."""
    if isinstance(exc, ssrf.ResolutionFailed):
        return "DNS resolution failed"
    reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None)
    return type(exc).__name__ + (f" ({reason})" if isinstance(reason, str) and reason else "")


def ssrf_where(url: str) -> str:
    try:
        return ssrf.parse_webhook_url(url).where
    except WebhookRefused:
        return "an invalid URL"


# --- the request --------------------------------------------------------------------------


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256(secret, timestamp + "." + body)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def encode(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def request_headers(*, event: str, event_id: str, delivery_id: str, instance: str,
                    timestamp: str, secret: str, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Archiver-Event": event,
        "X-Archiver-Event-Id": event_id,
        "X-Archiver-Delivery": delivery_id,
        "X-Archiver-Instance": instance,
        "X-Archiver-Timestamp": timestamp,
        "X-Archiver-Signature": signature(secret, timestamp, body),
    }


def signed_request(delivery: WebhookDelivery, secret: str, now: dt.datetime) -> tuple[bytes, dict[str, str]]:
    """The body (the stored payload: the same bytes on every attempt) and its headers."""
    payload = delivery.event.payload
    body = encode(payload)
    headers = request_headers(
        event=delivery.event.name, event_id=str(delivery.event.event_id),
        delivery_id=str(delivery.pk), instance=payload.get("instance", ""),
        timestamp=str(int(now.timestamp())), secret=secret, body=body,
    )
    return body, headers


# --- the steps the daemon calls -------------------------------------------------------------


def lease_owner(runner_id: str, thread: int) -> str:
    """Who holds a delivery's lease: one of a runner's delivery threads (64 characters fit)."""
    return f"{runner_id}/webhooks-{thread}"[-64:]


class Receivers:
    """The receivers (host:port) this runner has a delivery in flight to: one at a time each.

    `claim()` takes the next due delivery whose receiver is free and marks that receiver
    busy until `release()`; the lock makes "free?" and the claim one step among this
    runner's threads (another runner's threads are not counted).
    """

    def __init__(self, stop: threading.Event | None = None):
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self.stop = stop  # set: a thread waiting for its turn claims nothing

    def claim(self, owner: str, now: dt.datetime, lease_seconds: float) -> tuple[Claim, str] | None:
        if not self._turn():
            return None
        try:
            busy = [pk for pk, url in Webhook.objects.values_list("pk", "url")
                    if ssrf_where(url) in self._busy] if self._busy else []
            claims = WebhookDelivery.objects.open().exclude(webhook_id__in=busy).claim(
                owner, now, lease_seconds)
            if not claims:
                return None
            url = WebhookDelivery.objects.filter(pk=claims[0].pk).values_list(
                "webhook__url", flat=True).first()
            where = ssrf_where(url or "")
            self._busy.add(where)
            return claims[0], where
        finally:
            self._lock.release()

    def _turn(self) -> bool:
        """The lock, or False once stopping: each turn may wait on a locked database (SQLite
        held by another writer), and the threads queued behind it held a stop that long."""
        while not self._lock.acquire(timeout=0.1):
            if self.stop is not None and self.stop.is_set():
                return False
        return True

    def release(self, where: str) -> None:
        with self._lock:
            self._busy.discard(where)


def deliver_due_webhooks(owner: str, now: dt.datetime, deliverer: Deliverer | None = None,
                         limit: int = 10, receivers: Receivers | None = None) -> bool:
    """Claim and deliver up to `limit` due deliveries, one at a time; True if any was due.

    Claiming one at a time keeps each lease as short as one attempt, whatever `limit` is.
    With `receivers` (shared by a dispatcher's threads), a delivery to a receiver that has
    one in flight waits for it.
    """
    deliverer = deliverer or Deliverer()
    receivers = receivers or Receivers()
    found = False
    for _ in range(limit):
        claimed = receivers.claim(owner, now, deliverer.policy.lease_seconds)
        if claimed is None:
            break
        found = True
        try:
            deliverer.deliver(claimed[0], now)
        finally:
            receivers.release(claimed[1])
    return found


def send_ping(hook, deliverer: Deliverer | None = None, now: dt.datetime | None = None) -> Outcome:
    """POST a signed `ping` event to `hook` at once, outside the outbox (`webhook test`)."""
    deliverer = deliverer or Deliverer()
    now = now or db_now()
    settings = conf.get()
    try:
        destination = ssrf.check_url(hook.url, settings, deliverer.resolver)
    except WebhookRefused as exc:
        return Outcome(False, error=f"refused: {exc}")
    except OSError as exc:
        return Outcome(False, error=transport_error(exc))
    event_id = str(uuid.uuid4())
    timestamp = str(int(now.timestamp()))
    body = encode({"event": "ping", "event_id": event_id, "instance": settings.instance_id,
                   "timestamp": now.isoformat().replace("+00:00", "Z"), "webhook": hook.pk})
    headers = request_headers(event="ping", event_id=event_id, delivery_id="ping",
                              instance=settings.instance_id, timestamp=timestamp,
                              secret=hook.secret, body=body)
    try:
        response = deliverer.transport.post(destination, body, headers, deliverer.policy.timeout,
                                            deadline=deliverer.policy.deadline)
    except TimeoutError:
        return Outcome(False, error=f"timed out at {destination.where}")
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(False, error=f"{transport_error(exc)} at {destination.where}")
    return judge(response, destination.where)


class WebhookDispatcher(PollingThreads):
    """Runs deliver_due_webhooks in background threads until stop().

    The runner daemon starts one next to its loop: `WebhookDispatcher(owner).start()`,
    and `stop()` when it shuts down. `wake()` makes it look for due deliveries now. Its
    threads share one `Receivers`: each receiver gets one delivery at a time, so a slow
    one holds one thread (for one deadline at most), never the others. A failed pass is
    mostly a DatabaseError (locked, restarting): the delivery in hand, if any, is claimed
    again when its lease ends.
    """

    what = "webhook delivery pass"

    def __init__(self, owner: str, *, threads: int = 1, deliverer: Deliverer | None = None,
                 poll_interval: float | None = None, clock: Callable[[], dt.datetime] = db_now):
        super().__init__([(f"webhooks-{n}", lease_owner(owner, n)) for n in range(threads)],
                         poll_interval if poll_interval is not None else conf.get().poll_interval)
        self.owner = owner
        self.deliverer = deliverer or Deliverer()
        self.clock = clock
        self.receivers = Receivers(self.stop_event)

    def pass_once(self, owner: str) -> bool:
        return deliver_due_webhooks(owner, self.clock(), self.deliverer, limit=1,
                                    receivers=self.receivers)
