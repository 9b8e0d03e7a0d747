"""Planning and starting a crawl's instances: the Process row first, then the launch.

A row is written before its instance is launched (with its relaunch backoff as `retry_at`),
and before launching a pending row the launcher is asked whether one was started for it
already (a crash between the launch and the row update): docs/architecture.md, "Resources
are owned through the lease". What the crawler is given is built here: its config file
(with what is left of the crawl's limits), its browser profile, its Redis credentials and,
with a bucket, the upload contract.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import redis

from archiver.errors import CrawlFailed, EngineUnavailable, ImageMissing, LaunchError
from crawls import dedup, wacz_auth
from crawls.config import CrawlConfig, human_size
from crawls.models import Crawl, CrawlStatus, ExitReason, Process, ProcessStatus
from crawls.profiles import profile_path
from runner import archive, bucket, decide, uploads
from runner.decide import FAILED_ATTEMPT
from runner.keep import keep_session
from runner.launchers import LaunchSpec, hostname
from runner.redis_server import for_crawlers
from runner.state import Held, Runtime

S = CrawlStatus

ENGINE_RETRY = 2.0  # launch again this long after the engine did not answer
IMAGE_RETRY = 10.0  # look for a missing crawler image again this often
REDIS_RELAUNCH = 2.0  # an instance that exited because Redis was away is relaunched after this
ENGINE_WAIT = "waiting: Docker engine unreachable"
LAST_FAILURE = {ExitReason.CRASH: "the crawler crashed", ExitReason.OOM: "the crawler ran out of memory",
                ExitReason.UNREPORTED: "the crawler exited without reporting how it ended"}


def start_or_follow(rt: Runtime, crawl: Crawl, held: Held, process: Process, now: dt.datetime) -> None:
    """Launch the instance of a due row, or follow the one a crash left already started."""
    found = find_started(rt, crawl, process)
    if found is None:
        start_instance(rt, crawl, held, process, now)
        return
    ref = found.ref if rt.launcher.ref_of(process) != found.ref else ""
    process.mark_running(now, ref=ref, pid=found.pid, runner=rt.id, launcher=rt.launcher.name,
                         done=crawl.pages_done)
    rt.event(f"crawl {crawl.short_id}: instance {process.instance} was already running; following it")


def find_started(rt: Runtime, crawl: Crawl, process: Process):
    """An instance already started for this row (a crash cut its launch short), or None."""
    instance_dir = rt.settings.crawls_dir / crawl.pk / str(process.instance)
    try:
        instance = rt.launcher.find(process.pk, crawl.pk, process.instance, instance_dir)
    except LaunchError:
        return None
    return instance if instance is not None and instance.running else None


def plan_launch(rt: Runtime, crawl: Crawl, instance: int, now: dt.datetime) -> Process:
    """A Process row for the next launch of `instance`, due after its backoff."""
    history = list(Process.objects.filter(crawl=crawl, instance=instance)
                   .order_by("created_at", "pk").values_list("exit_reason", "status", "ended_at"))
    failures = decide.failures_of(history)
    if failures >= rt.settings.max_launch_attempts:
        what = LAST_FAILURE.get(history[-1][0], "the crawler failed")
        raise CrawlFailed(f"{what} (failed {failures} times, gave up; see the crawl's log)",
                          detail=f"crawler instance {hostname(crawl.pk, instance)} failed {failures} times")
    delay = decide.relaunch_delay(failures) if history and history[-1][0] in FAILED_ATTEMPT else 0.0
    if history and history[-1][0] == ExitReason.REDIS:
        delay = max(delay, REDIS_RELAUNCH)
    if history and history[-1][0] == ExitReason.STORAGE:
        delay = bucket.relaunch_delay(rt, crawl, instance, history, now)  # said once, by itself
    elif delay:
        rt.note(crawl, f"relaunching instance {instance} in {delay:g} s (failure {failures})", now=now)
    return Process.objects.create(
        crawl=crawl, instance=instance, hostname=hostname(crawl.pk, instance),
        launcher=rt.launcher.name, runner=rt.id, status=ProcessStatus.STARTING,
        retry_at=now + dt.timedelta(seconds=delay), created_at=now,
    )


def crawler_config(rt: Runtime, crawl: Crawl, now: dt.datetime) -> dict:
    """The crawler's config file: the crawl's config, with what is left of its limits, so
    the crawler itself stops within them (crawler-protocol.md: per session)."""
    config = crawl.launch_config()
    page_limit = min(filter(None, [config.page_limit, crawl.org.max_pages_per_crawl]), default=None)
    values = config.crawler_config(page_limit)
    if config.size_limit and not crawl.config_override:
        values["sizeLimit"] = max(config.size_limit - crawl.size_bytes, 1)
    if config.time_limit and not crawl.config_override:
        values["timeLimit"] = max(int(config.time_limit - crawl.elapsed_seconds), 1)
    if crawl.dedup_enabled and not rt.settings.browser_crawler(rt.launcher.name):
        values["dedup"] = True  # browsertrix-crawler needs no option: it reads its index
    if not rt.settings.browser_crawler(rt.launcher.name):
        values.update(host_budget(rt.settings, config))
    if config.sitemap and config.sitemap_since == "last":
        values.update(sitemap_since_last(crawl, now))
    return values


def sitemap_since_last(crawl: Crawl, now: dt.datetime) -> dict:
    """`--sitemap-since last`: the start of the last complete crawl of the same seeds, to the
    second rounded down (a page changed in that second is taken); none: every URL listed."""
    last = crawl.last_complete_start(crawl.started_at or now)
    if last is None:
        return {}
    return {"sitemapFromDate": last.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def host_budget(settings, config: CrawlConfig) -> dict:
    """The options of every crawl's budget per host (the crawler's hosts.py): the crawl's own
    rate or ARCHIVER_HOST_RATE, and ARCHIVER_HOST_RATES's patterns, which win over both.
    Empty when there is no limit, so a crawler without these options still runs."""
    rate = settings.host_rate if config.host_rate is None else config.host_rate
    values: dict = {"hostRate": rate} if rate else {}
    if settings.host_rates:
        values["hostRates"] = [f"{pattern}={rate:g}" for pattern, rate in settings.host_rates]
    return values


def hand_known_payloads(rt: Runtime, crawl: Crawl) -> None:
    """The org's kept payload digests, in the crawl's Redis before its first launch, in the
    layout its crawler reads (they stay until the crawl's database is flushed, for
    relaunches and scale-ups)."""
    client = rt.store.client(crawl.redis_db)
    if client.exists(f"{crawl.pk}:dedup:done"):
        return
    browsertrix = rt.settings.browser_crawler(rt.launcher.name)
    hand = dedup.hand_to_browsertrix if browsertrix else dedup.hand_to_crawler
    limit = rt.settings.dedup_max_payloads
    count, refused = 0, no_room(client, lambda: dedup.index_bytes(crawl, limit, browsertrix))
    if not refused:
        try:
            count = hand(client, crawl, limit)
        except redis.ResponseError as exc:
            # Out of memory after all (noeviction): the crawl goes on without the index
            # rather than leave it half-written, taking room other crawls' writes need.
            dedup.drop_handed(client, crawl)
            count, refused = 0, f"; Redis refused the index ({str(exc)[:80]})"
    client.set(f"{crawl.pk}:dedup:done", count)
    # Measured before its crawler writes anything there: the Redis budget is for what the
    # crawler writes, and an org's index may well be larger (observe.check_redis_budget).
    # In the crawl's row, not its Redis, which the crawler could write.
    try:
        crawl.record_dedup_index(rt.store.memory(crawl.redis_db) if count else 0)
    except redis.ResponseError:  # no MEMORY USAGE here: no budget is enforced either
        crawl.record_dedup_index(0)
    more = (f" (the newest of {dedup.known_payloads(crawl).count()}: ARCHIVER_DEDUP_MAX_PAYLOADS)"
            if count == limit else "")
    rt.note(crawl, f"deduplicating against {count} payload(s) the org kept{more}{refused}")


def no_room(client, estimate: Callable[[], int]) -> str:
    """Why a dedup index of `estimate()` bytes is not written to a server with a memory
    limit: it may take at most half of the room left, the rest is for the crawls' own writes
    (a write over the limit fails, for every crawl); "" when it fits or there is no limit
    (then nothing is estimated: that reads every payload handed)."""
    try:
        memory = client.info("memory")
    except redis.ResponseError:  # a server that will not say: its refusal is the guard
        return ""
    if not memory.get("maxmemory"):
        return ""
    room = int(memory["maxmemory"]) - int(memory.get("used_memory") or 0)
    needed = estimate()
    if needed <= room // 2:
        return ""
    return (f"; not handed: about {human_size(needed)} where the Redis server has "
            f"{human_size(max(room, 0))} left (ARCHIVER_DEDUP_MAX_PAYLOADS, ARCHIVER_REDIS_MAX_BYTES)")


def browser_profile(rt: Runtime, crawl: Crawl, config: CrawlConfig) -> Path | None:
    """The profile file a crawl's instances mount, after checking this runner can launch its
    browser options at all; CrawlFailed (with the profile's name only) when it cannot."""
    launcher = rt.launcher.name
    own = not rt.settings.browser_crawler(launcher)
    if own and config.uses_browser() and not config.browser:
        raise CrawlFailed(f"its browser options need browser mode; this runner's crawler "
                          f"{rt.settings.crawler_name(launcher)} runs it over HTTP only")
    if own and (config.block_ads or config.profile):
        raise CrawlFailed(f"its --block-ads or --profile need browsertrix-crawler; this runner's "
                          f"crawler is {rt.settings.crawler_name(launcher)}")
    if config.profile is None:
        return None
    path = profile_path(rt.settings.data_dir, crawl.org_id, config.profile)
    if not path.is_file():  # removed since, or added on another runner's data dir
        raise CrawlFailed(f"its browser profile {config.profile!r} is not in this runner's data dir "
                          f"(add it again with: archiver profile add {config.profile} FILE)")
    return path


def crawler_browser_args(rt: Runtime, config: CrawlConfig) -> tuple[str, ...]:
    """The browser flags of a crawl for this runner's crawler. archiver's own crawler gets
    --browser as the crawl was added (CrawlConfig.browser, resolved then) and, under the
    local launcher, the host's Chromium; CrawlFailed when browser mode finds none."""
    launcher = rt.launcher.name
    if rt.settings.browser_crawler(launcher):
        return tuple(config.browser_args())
    if not config.browser:
        return ()
    chromium = rt.settings.chromium_path(launcher)
    if chromium is None:
        raise CrawlFailed("it runs in browser mode and this runner finds no Chromium (install "
                          "the chromium package, or set ARCHIVER_CHROMIUM to its path)")
    # In an image the crawler's own default finds the image's Chromium.
    return tuple(config.own_crawler_args(chromium if launcher == "local" else None))


def start_instance(rt: Runtime, crawl: Crawl, held: Held, process: Process, now: dt.datetime) -> bool:
    instance_dir = rt.settings.crawls_dir / crawl.pk / str(process.instance)
    try:
        with archive.folder(rt.settings.data_dir, archive.CRAWLS, crawl.pk, str(process.instance),
                            create=True):
            pass  # created (0700) without following a link a crawler planted
    except archive.Refused as exc:
        raise CrawlFailed(f"cannot prepare its crawler's folder: {exc}") from exc
    config = crawl.launch_config()
    profile = browser_profile(rt, crawl, config)  # before Redis grants anything: it may refuse
    if crawl.dedup_enabled:
        hand_known_payloads(rt, crawl)
    browser_args = crawler_browser_args(rt, config)
    spec = LaunchSpec(
        crawl_id=crawl.pk, instance=process.instance, process_id=process.pk,
        instance_dir=instance_dir, workers=config.workers,
        redis=for_crawlers(rt.store.grant(crawl.redis_db, crawl.pk), rt.settings.redis_public_url),
        db=crawl.redis_db, runner_id=rt.id,
        disk_utilization=int(rt.settings.disk_threshold_percent),
        config=crawler_config(rt, crawl, now), org=crawl.org.slug,
        browser_args=browser_args, profile=profile,
        storage_env=uploads.crawler_env(rt.settings.s3, crawl.pk, process.hostname, process.pk)
        if rt.settings.s3 else {},
        report_key=uploads.reports_key(crawl.pk),
        signing_env=wacz_auth.crawler_env(rt.settings),
    )
    try:
        launched = rt.launcher.launch(spec)
    except ImageMissing as exc:
        cannot_launch_yet(rt, crawl, held, process, f"waiting: {exc}"[:300], exc, IMAGE_RETRY, now)
        return False
    except EngineUnavailable as exc:
        rt.listed = None  # do not wait for the engine again this tick
        cannot_launch_yet(rt, crawl, held, process, ENGINE_WAIT, exc, ENGINE_RETRY, now)
        return False
    except LaunchError as exc:
        if exc.permanent:
            raise CrawlFailed(f"cannot launch its crawler: {exc}") from exc
        process.mark_lost(ExitReason.CRASH, str(exc), now)
        rt.note(crawl, f"launching instance {process.instance} failed: {exc}", "warning", now)
        return False
    process.mark_running(now, ref=launched.container_id, pid=launched.pid, image=launched.image,
                         args=launched.args, runner=rt.id, launcher=rt.launcher.name,
                         done=crawl.pages_done)
    rt.event(f"crawl {crawl.short_id}: launched instance {process.instance} ({rt.launcher.name})")
    if crawl.status in (S.STARTING, S.WAITING_CAPACITY):
        crawl.mark_running(held.token, now)
    return True


def cannot_launch_yet(rt: Runtime, crawl: Crawl, held: Held, process: Process, reason: str,
                      exc: Exception, retry: float, now: dt.datetime) -> None:
    """Not a crash of the crawl (the engine is away, the image is missing): the row waits,
    the crawl says why, once. The runner never pulls an image in its loop."""
    process.defer(now + dt.timedelta(seconds=retry))
    if crawl.waiting_reason == reason:
        return
    rt.note(crawl, f"cannot launch: {exc}", "warning", now)
    if crawl.status in (S.STARTING, S.RUNNING):
        crawl.mark_waiting(S.WAITING_CAPACITY, reason, held.token, now)
    else:
        rt.set_waiting_reason(crawl, reason, now)


def restart_instances(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Stop every running instance and keep what it packaged; the next launch round starts
    them again. Not a failure: no backoff, no attempt used. On SIGTERM the real crawler
    exits 11 with status `interrupted` and writes NO WACZ: its WARCs stay in its folder and
    the next session's WACZ holds them (archiver's own crawler packages before it exits)."""
    for process in crawl.processes.filter(status=ProcessStatus.RUNNING):
        rt.launcher.remove(rt.launcher.ref_of(process))
        keep_session(rt, crawl, process, now)
        process.mark_removed(now)
