"""Carrying out the runner's decisions: one small function per action of runner/decide.py.

Every write to a crawl names our lease token (through its model methods), so a runner that
lost a crawl's lease changes nothing about it. Handlers raise CrawlFailed when the crawl
cannot go on; the supervise step's error boundary fails it with that message. What a
handler needs done beyond one call lives in the homes below it, none of which imports this
module: runner/ingest.py (pages), runner/crawler_log.py (an ended instance's log),
runner/keep.py (its archive), runner/launch.py (instances), runner/ending.py (the end).
"""

from __future__ import annotations

import contextlib
import json
import logging

import redis

from archiver.errors import CrawlFailed, EngineUnavailable
from crawls import quotas
from crawls.models import CrawlStatus, ExitReason, Intent, StopReason
from runner import bucket, crawler_log, decide, ending, launch
from runner.decide import (
    CancelTimeout,
    ClearFlag,
    Corrupt,
    CountTime,
    CutOff,
    DropPending,
    EngineState,
    Fail,
    Finish,
    FollowState,
    HandleExit,
    Ingest,
    Launch,
    LimitStop,
    MarkStarted,
    PauseForDisk,
    RecordProgress,
    RecordUserStop,
    RedisBack,
    RedisDown,
    SendMessages,
    SetFlag,
    Stalled,
    StopOne,
)
from runner.ingest import ingest_read
from runner.keep import keep_session
from runner.launchers import hostname
from runner.observe import Observation
from runner.progress import Flag
from runner.state import Held, Runtime

log = logging.getLogger("runner.daemon")
S = CrawlStatus

REDIS_WAIT = "waiting: Redis unreachable"
CORRUPT_WAIT = "waiting: progress data unreadable"


def carry_out(rt: Runtime, obs: Observation, held: Held, action) -> None:
    """Apply one action, unless an earlier one let the crawl go."""
    if obs.crawl.pk in rt.held:
        APPLY[type(action)](rt, obs, held, action)


# --- Redis faults ---------------------------------------------------------------------------


def redis_down(rt: Runtime, obs, held: Held, action: RedisDown) -> None:
    if held.redis_down_since is not None:
        return
    held.redis_down_since = obs.now
    rt.note(obs.crawl, f"Redis does not answer ({action.what}); waiting for it", "warning", obs.now)
    rt.set_waiting_reason(obs.crawl, REDIS_WAIT, obs.now)
    if rt.on_redis_down:
        rt.on_redis_down()


def corrupt(rt: Runtime, obs, held: Held, action: Corrupt) -> None:
    if held.corrupt_since is not None:
        return
    held.corrupt_since = obs.now
    rt.note(obs.crawl, f"cannot read its progress: {action.message}", "error", obs.now)
    rt.set_waiting_reason(obs.crawl, f"{CORRUPT_WAIT}: {action.message}", obs.now)


def redis_back(rt: Runtime, obs, held: Held, action: RedisBack) -> None:
    if held.redis_down_since:
        rt.note(obs.crawl, "Redis answers again", now=obs.now)
    held.redis_down_since = held.corrupt_since = None
    if obs.crawl.waiting_reason.startswith((REDIS_WAIT, CORRUPT_WAIT)):
        rt.set_waiting_reason(obs.crawl, "", obs.now)


def fail_now(rt: Runtime, obs, held: Held, action: Fail) -> None:
    raise CrawlFailed(action.error, action.stop_reason)


# --- progress ------------------------------------------------------------------------------


def ingest_all(rt: Runtime, obs, held: Held, action: Ingest) -> None:
    held.failed_read = ingest_read(rt, obs.crawl, obs.progress, obs.now)


def record_progress(rt: Runtime, obs, held: Held, action: RecordProgress) -> None:
    crawl = obs.crawl
    changed = {k: v for k, v in action.values.items() if getattr(crawl, k) != v}
    if changed.get("pages_done", 0) > crawl.pages_done:
        changed["progress_at"] = obs.now
    if changed:
        rt.save(crawl, obs.now, **changed)


# --- commands ------------------------------------------------------------------------------


def pause_for_disk(rt: Runtime, obs, held: Held, action: PauseForDisk) -> None:
    """Pause a running crawl while the disk is full; the disk step queues it again.

    The reason is kept as its waiting reason ("paused: disk 93 % full ..."), which is what
    tells it from a crawl a person paused.
    """
    reason = "paused: " + action.reason.removeprefix("waiting: ").removeprefix("paused: ")
    if obs.crawl.request_disk_pause(reason, held.token, obs.now):
        held.pause_reason = reason[:300]
        rt.note(obs.crawl, f"pausing: {reason.removeprefix('paused: ')}", "warning", obs.now)


def limit_stop(rt: Runtime, obs, held: Held, action: LimitStop) -> None:
    if obs.crawl.request_limit_stop(action.reason, held.token, obs.now):
        rt.note(obs.crawl, f"stopping: {obs.limit_message}", now=obs.now)


def cut_off(rt: Runtime, obs, held: Held, action: CutOff) -> None:
    """Over its Redis budget: not asked to stop (a crawler that ignores it went on filling the
    server every crawl shares, and its memory stayed taken until it exited), but cut off:
    its Redis identity off, its connections closed, its keys dropped, its instances removed.
    What it reported and packaged before is kept."""
    crawl = obs.crawl
    rt.store.cut_off(crawl.redis_db, crawl.pk)
    rt.note(crawl, f"cut off: {obs.limit_message}", "warning", obs.now)
    ending.finish(rt, crawl, decide.Outcome(S.STOPPED_SIZE_LIMIT, StopReason.REDIS_BUDGET), obs.now,
                  read_last=False)


def record_user_stop(rt: Runtime, obs, held: Held, action: RecordUserStop) -> None:
    obs.crawl.record_user_stop(held.token, obs.now)


def set_flag(rt: Runtime, obs, held: Held, action: SetFlag) -> None:
    crawl = obs.crawl
    rt.store.set_flag(crawl.redis_db, crawl.pk, action.flag)
    held.flags.add(action.flag)
    rt.note(crawl, f"asked its crawlers to {crawl.intent or 'stop'}", now=obs.now)
    if action.flag == Flag.CANCELED:
        held.canceled_at = obs.now


def clear_flag(rt: Runtime, obs, held: Held, action: ClearFlag) -> None:
    rt.store.clear_flag(obs.crawl.redis_db, obs.crawl.pk, action.flag)
    held.flags.discard(action.flag)


def send_messages(rt: Runtime, obs, held: Held, action: SendMessages) -> None:
    crawl = obs.crawl
    for message in obs.messages:
        for i in range(crawl.scale):
            rt.store.client(crawl.redis_db).rpush(f"{hostname(crawl.pk, i)}:msg",
                                                  json.dumps(message.payload))
        message.mark_sent(obs.now)


def stop_one(rt: Runtime, obs, held: Held, action: StopOne) -> None:
    rt.store.stop_one(obs.crawl.redis_db, obs.crawl.pk, hostname(obs.crawl.pk, action.instance))
    held.stopping_instances.add(action.instance)


# --- instances -----------------------------------------------------------------------------


def mark_started(rt: Runtime, obs, held: Held, action: MarkStarted) -> None:
    action.process.mark_running(obs.now, done=obs.crawl.pages_done)


def handle_exit(rt: Runtime, obs, held: Held, action: HandleExit) -> None:
    """Record how an instance ended, keep its WACZ, remove it; raise CrawlFailed if permanent."""
    crawl, process, code, now = obs.crawl, action.process, action.code, obs.now
    tail = crawler_log.read_tail(rt, process)
    crawler_log.keep_log(crawl, process, tail, now)
    reason = decide.classify_exit(code, action.oom, crawler_log.exit_status(rt, crawl, process, action))
    keep_session(rt, crawl, process, now)
    if code is None:
        process.mark_lost(ExitReason.CRASH, tail, now)
    else:
        process.mark_exited(code, reason, tail, now)
    with contextlib.suppress(EngineUnavailable):
        rt.launcher.remove(rt.launcher.ref_of(process))
    if process.instance >= crawl.scale and crawl.redis_db is not None:
        # Scaled down: it finished on `stopone`; the crawl no longer waits for it.
        with contextlib.suppress(redis.RedisError):
            rt.store.forget_instance(crawl.redis_db, crawl.pk, process.hostname)
        held.stopping_instances.discard(process.instance)
    said = rt.settings.s3 is None or bucket.exit_said(rt, crawl, process, reason, now)
    if said and (code != 0 or reason != ExitReason.DONE):
        what = "vanished" if code is None else f"exited with code {code} ({reason})"
        if reason == ExitReason.UNREPORTED:
            what = "exited with code 0 without reporting how it ended; counted as a failed attempt"
        rt.note(crawl, f"instance {process.hostname} {what}", "warning" if reason != ExitReason.DONE
                else "info", now, exit_code=code, log_tail=tail[-1000:])
    # Exit 9 after a stop or cancel is the outcome's to judge (canceled when nothing was done),
    # and so is a failed-pages session's: the crawl keeps the pages it has.
    if reason == ExitReason.PERMANENT or (reason == ExitReason.NO_PAGE and not
                                          (crawl.intent or crawl.stop_reason or crawl.config_override)):
        error, detail = crawler_log.failure(crawl, process, code, tail, no_page=reason == ExitReason.NO_PAGE)
        raise CrawlFailed(error, detail=detail)
    if reason == ExitReason.DISK and not crawl.intent:
        pause_for_disk(rt, obs, held, PauseForDisk(f"disk: crawler instance {process.hostname} "
                                                   f"ran out of disk space (exit {code})"))


def engine_state(rt: Runtime, obs, held: Held, action: EngineState) -> None:
    crawl = obs.crawl
    # The daemon's log says it once for all crawls (steps/recover.py); each crawl's log here.
    # Whether its crawlers run on depends on the engine: with live-restore they do; without,
    # it stopped them and they are relaunched once it is back.
    if action.down and not held.engine_down:
        held.engine_down = True
        rt.tell(crawl, "the Docker engine does not answer; waiting for it", "warning", obs.now)
        if crawl.status == S.STARTING:  # nothing launched yet: it waits for the engine
            crawl.mark_waiting(S.WAITING_CAPACITY, launch.ENGINE_WAIT, held.token, obs.now)
        else:
            rt.set_waiting_reason(crawl, launch.ENGINE_WAIT, obs.now)
    elif not action.down and held.engine_down:
        held.engine_down = False
        rt.tell(crawl, "the Docker engine answers again", "info", obs.now)
        if crawl.waiting_reason == launch.ENGINE_WAIT:
            rt.set_waiting_reason(crawl, "", obs.now)


def count_time(rt: Runtime, obs, held: Held, action: CountTime) -> None:
    quotas.count_crawl_time(obs.crawl, obs.now)
    held.counted_at = obs.now


def cancel_timeout(rt: Runtime, obs, held: Held, action: CancelTimeout) -> None:
    # A canceled crawl keeps nothing, so there is nothing to wait for.
    rt.note(obs.crawl, f"crawlers still running {rt.cancel_grace:g} s after the cancel; "
                       "removing them", "warning", obs.now)
    ending.finish(rt, obs.crawl, decide.Outcome(S.CANCELED, "user"), obs.now)


# --- launching -----------------------------------------------------------------------------


def launch_instance(rt: Runtime, obs, held: Held, action: Launch) -> None:
    """A new row for the instance (launched unless its relaunch backoff runs), or its
    pending row once due."""
    crawl, now = obs.crawl, obs.now
    if action.pending is None:
        process = launch.plan_launch(rt, crawl, action.instance, now)
        due = not (process.retry_at and process.retry_at > now)
    else:
        process, due = action.pending, action.due
    if due:
        launch.start_or_follow(rt, crawl, held, process, now)


# --- state ---------------------------------------------------------------------------------


def follow_state(rt: Runtime, obs, held: Held, action: FollowState) -> None:
    crawl = obs.crawl
    if action.state == S.RUNNING:
        crawl.mark_running(held.token, obs.now)
    elif crawl.status != S.WAITING_CAPACITY:
        crawl.mark_finishing(action.state, held.token, obs.now)


def stalled(rt: Runtime, obs, held: Held, action: Stalled) -> None:
    crawl, now, minutes = obs.crawl, obs.now, rt.settings.stall_minutes
    if not crawl.record_stall(held.token, now):
        return
    if crawl.stalls_exhausted:
        raise CrawlFailed(f"no page was done for {minutes:g} minutes, {crawl.stalls} times",
                          stop_reason="stalled")
    rt.note(crawl, f"stalled: no page done for {minutes:g} minutes; restarting its crawlers",
            "warning", now)
    launch.restart_instances(rt, crawl, now)


def drop_pending(rt: Runtime, obs, held: Held, action: DropPending) -> None:
    action.process.mark_removed(obs.now)
    rt.note(obs.crawl, f"instance {action.process.instance} is not launched again: the crawl is "
                       f"{'canceled' if obs.crawl.intent == Intent.CANCEL else 'stopping'}", now=obs.now)


def finish_crawl(rt: Runtime, obs, held: Held, action: Finish) -> None:
    if action.outcome.status in (S.CANCELED, S.PAUSED) or bucket.may_finish(rt, obs.crawl, obs.now):
        ending.finish(rt, obs.crawl, action.outcome, obs.now)


APPLY = {
    RedisDown: redis_down, Corrupt: corrupt, RedisBack: redis_back, Fail: fail_now,
    Ingest: ingest_all, RecordProgress: record_progress, PauseForDisk: pause_for_disk,
    LimitStop: limit_stop, CutOff: cut_off, RecordUserStop: record_user_stop, SetFlag: set_flag,
    ClearFlag: clear_flag, SendMessages: send_messages, StopOne: stop_one,
    MarkStarted: mark_started, HandleExit: handle_exit, EngineState: engine_state,
    CountTime: count_time, CancelTimeout: cancel_timeout, Launch: launch_instance,
    Finish: finish_crawl, FollowState: follow_state, Stalled: stalled, DropPending: drop_pending,
}
