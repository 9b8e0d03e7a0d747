"""/metrics: the fleet in the Prometheus text format, computed when scraped (docs/metrics.md).

Every value comes from the database (a few grouped counts, each on an indexed column or a
small table) or Redis (INFO, and a bounded sample per crawl database), so a scrape costs
the same whether it comes every 15 s or once a day, and nothing is kept in this process:
the admin may run several workers on several hosts and each answers alike. The runner's
tick durations are in its RunnerRecord row (written with each heartbeat), since the
runner is another process.

The view answers only a request bearing ARCHIVER_METRICS_TOKEN (compared in constant time);
unset, /metrics is 404, as if it did not exist.
"""

from __future__ import annotations

import datetime as dt
import hmac
import itertools
import logging

from django.db.models import Count, Min, Sum
from django.http import HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, HistogramMetricFamily

from archiver import conf
from crawls.models import (
    Crawl,
    CrawlStatus,
    DeliveryStatus,
    ExitReason,
    Org,
    Process,
    RunnerRecord,
    WebhookDelivery,
)

log = logging.getLogger(__name__)

# What generate_latest writes; said outright, since newer prometheus_client's
# CONTENT_TYPE_LATEST names version 1.0.0, which Prometheus before 3.0 does not know.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

S = CrawlStatus
REDIS_TIMEOUT = 2.0  # seconds: a Redis that does not answer costs a scrape this, no more
MEMORY_SAMPLE = 50  # keys per crawl database sized with MEMORY USAGE (scaled up by DBSIZE)
PAUSE_SCAN = 2000  # keys of database 0 looked at for host pauses, at most
RUNNERS_SHOWN = 200  # runner rows, newest heartbeat first
HEARTBEAT_RECENT = dt.timedelta(days=1)  # stopped runners shown this long after their last beat


class ArchiverCollector:
    """A prometheus_client collector reading the database and Redis at each collect()."""

    def collect(self):
        now = timezone.now()
        yield from crawl_metrics(now)
        yield from process_metrics()
        yield from webhook_metrics()
        yield from runner_metrics(now)
        yield from redis_metrics(now)


def crawl_metrics(now: dt.datetime):
    states = GaugeMetricFamily("archiver_crawls", "Crawls in each state.", labels=["state"])
    counts = dict.fromkeys(S.values, 0)
    for row in Crawl.objects.order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    for state, n in counts.items():
        states.add_metric([state], n)
    yield states
    waiting = Crawl.objects.order_by().filter(status__in=S.NOT_STARTED)
    yield GaugeMetricFamily("archiver_queue_depth", "Crawls not started yet (queued or waiting for "
                            "capacity or their org's limit).", value=waiting.count())
    oldest = waiting.filter(retry_at__lte=now).aggregate(at=Min("created_at"))["at"]
    yield GaugeMetricFamily("archiver_queue_oldest_due_age_seconds", "How long the oldest crawl due "
                            "to be taken has existed; 0 when none is due.",
                            value=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
    # One pass over the crawl table: pages have no running total kept anywhere else.
    sums = Crawl.objects.order_by().aggregate(pages=Sum("pages_done"), failed=Sum("pages_failed"))
    kept = Org.objects.order_by().aggregate(size=Sum("bytes_stored"))["size"] or 0
    yield GaugeMetricFamily("archiver_pages_archived", "Pages done, summed over every crawl kept.",
                            value=sums["pages"] or 0)
    yield GaugeMetricFamily("archiver_pages_failed", "Pages that failed, summed over every crawl kept.",
                            value=sums["failed"] or 0)
    yield GaugeMetricFamily("archiver_archived_bytes", "Bytes of the archive files kept, every org's "
                            "stored bytes summed (what storage quotas count).", value=kept)


FAILED_EXITS = (ExitReason.OOM, ExitReason.PERMANENT, ExitReason.CRASH, ExitReason.NO_PAGE,
                ExitReason.UNREPORTED)


def process_metrics():
    launches = GaugeMetricFamily("archiver_launches", "Crawler instances launched (Process rows kept), "
                                 "by status.", labels=["status"])
    exits = GaugeMetricFamily("archiver_launch_exits", "Ended crawler instances by exit class "
                              "(exit_reason); failed says whether the class is a failure.",
                              labels=["exit_class", "failed"])
    by_status, by_reason = {}, dict.fromkeys([r for r in ExitReason.values if r], 0)
    for row in Process.objects.order_by().values("status", "exit_reason").annotate(n=Count("pk")):
        by_status[row["status"]] = by_status.get(row["status"], 0) + row["n"]
        if row["exit_reason"]:
            by_reason[row["exit_reason"]] = by_reason.get(row["exit_reason"], 0) + row["n"]
    for status, n in sorted(by_status.items()):
        launches.add_metric([status], n)
    for reason, n in by_reason.items():
        exits.add_metric([reason, "true" if reason in FAILED_EXITS else "false"], n)
    yield launches
    yield exits


def webhook_metrics():
    deliveries = GaugeMetricFamily("archiver_webhook_deliveries", "Webhook deliveries by status "
                                   "(pending and delivering are still open; failed gave up).", labels=["status"])
    counts = dict.fromkeys(DeliveryStatus.values, 0)
    for row in WebhookDelivery.objects.order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    for status, n in counts.items():
        deliveries.add_metric([status], n)
    yield deliveries


def runner_metrics(now: dt.datetime):
    beats = GaugeMetricFamily("archiver_runner_heartbeat_age_seconds", "Seconds since each runner's "
                              "last heartbeat (renewed every lease/3 s while it runs).",
                              labels=["runner", "hostname", "stopped"])
    ticks = HistogramMetricFamily("archiver_runner_tick_seconds", "How long each runner's loop "
                                  "ticks take, since it started.", labels=["runner"])
    rows = (RunnerRecord.objects.filter(heartbeat_at__gte=now - HEARTBEAT_RECENT)
            .order_by("-heartbeat_at")[:RUNNERS_SHOWN])
    for row in rows:
        beats.add_metric([row.id, row.hostname, "true" if row.stopped_at else "false"],
                         max(0.0, (now - row.heartbeat_at).total_seconds()))
        stats = row.tick_stats or {}
        if stats.get("bounds") and len(stats["bounds"]) == len(stats.get("counts", ())):
            buckets = [(str(float(b)), n) for b, n in zip(stats["bounds"], stats["counts"], strict=True)]
            ticks.add_metric([row.id], [*buckets, ("+Inf", stats.get("count", 0))],
                             sum_value=stats.get("sum", 0.0))
    yield beats
    yield ticks


def redis_endpoint():
    """The Redis the runners use, as this host's settings name it (the embedded one's
    address and password are in the data dir's run/redis.json); None when unknown."""
    from runner.redis_server import EmbeddedRedis, parse_url
    settings = conf.get()
    return parse_url(settings.redis_url) if settings.redis_url else EmbeddedRedis(settings).recorded()


def redis_metrics(now: dt.datetime):
    up = GaugeMetricFamily("archiver_redis_up", "1 if the runners' Redis answered this scrape.")
    try:
        endpoint = redis_endpoint()
        if endpoint is None:
            raise ConnectionError("no Redis recorded (no runner has started one on this host)")
        with endpoint.client(0, timeout=REDIS_TIMEOUT) as client:
            memory = client.info("memory")
            families = [*crawl_redis_metrics(endpoint), *host_pause_metrics(client, now)]
    except Exception as exc:  # noqa: BLE001 - a scrape shows Redis down, it does not fail
        log.info("metrics: Redis not read (%s)", type(exc).__name__)  # archiver_redis_up says it
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 1)
    yield up
    yield GaugeMetricFamily("archiver_redis_used_memory_bytes", "Redis's used_memory (INFO memory).",
                            value=memory.get("used_memory", 0))
    yield GaugeMetricFamily("archiver_redis_maxmemory_bytes", "Redis's maxmemory (0: none).",
                            value=memory.get("maxmemory", 0))
    yield from families


def crawl_redis_metrics(endpoint):
    """Each active crawl's database: its keys, and about the bytes they hold (sampled)."""
    keys = GaugeMetricFamily("archiver_crawl_redis_keys", "Keys in each active crawl's Redis database.",
                             labels=["crawl"])
    used = GaugeMetricFamily("archiver_crawl_redis_memory_bytes", "About the bytes each active crawl's "
                             "Redis database holds (MEMORY USAGE of a sample of its keys, scaled).",
                             labels=["crawl"])
    held = Crawl.objects.order_by().filter(redis_db__isnull=False, status__in=S.ACTIVE)
    for crawl_id, db in held.values_list("id", "redis_db"):
        with endpoint.client(db, timeout=REDIS_TIMEOUT) as client:
            count = client.dbsize()
            names = list(itertools.islice(client.scan_iter(count=MEMORY_SAMPLE), MEMORY_SAMPLE))
            size = 0
            if names:
                pipe = client.pipeline(transaction=False)
                for name in names:
                    pipe.memory_usage(name)
                size = sum(n or 0 for n in pipe.execute()) * max(count, len(names)) // len(names)
        keys.add_metric([crawl_id[:8]], count)
        used.add_metric([crawl_id[:8]], size)
    return [keys, used]


def host_pause_metrics(client, now: dt.datetime):
    """Hosts a 429 or 503 paused, every crawl together (the crawler's host:<h>:pause keys in
    database 0, whose value is the pause's end in ms); the scan is bounded."""
    names = list(itertools.islice(client.scan_iter(match="host:*:pause", count=500), PAUSE_SCAN))
    ends = client.mget(names) if names else []
    now_ms = now.timestamp() * 1000
    waits = [float(end) - now_ms for end in ends if end is not None and float(end) > now_ms]
    return [GaugeMetricFamily("archiver_hosts_paused", "Hosts whose politeness pause (asked by a 429 "
                              "or 503 Retry-After) is in force now.", value=len(waits)),
            GaugeMetricFamily("archiver_host_pause_longest_seconds", "The longest politeness pause "
                              "still to wait, in seconds (0: none).", value=max(waits, default=0) / 1000)]


def authorized(request) -> bool | None:
    """None: no token is set (no endpoint); else whether the request bears it."""
    token = conf.get().metrics_token
    if token is None:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    expected = token.get_secret_value().encode()
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected)


@require_GET
def metrics_view(request):
    allowed = authorized(request)
    if allowed is None:
        return HttpResponseNotFound("Not found", content_type="text/plain")
    if not allowed:
        return HttpResponseForbidden("/metrics needs the bearer token ARCHIVER_METRICS_TOKEN\n",
                                     content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ArchiverCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE)
