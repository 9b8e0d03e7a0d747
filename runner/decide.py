"""The runner's decisions, as pure functions of what it observed: no database, Redis or engine.

`first_round(obs, held, policy)` and `second_round(obs, held, policy)` turn an Observation
(runner/observe.py) into a list of actions (small frozen dataclasses below) that
runner/apply.py carries out. Tests call these with hand-made observations and a pinned
clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from crawls.models import (
    STOPPED_STATE,
    CrawlStatus,
    ExitReason,
    Intent,
    Process,
    ProcessStatus,
    StopReason,
)
from runner.progress import FINISHED_STATUSES, Flag

S = CrawlStatus

RELAUNCH_BASE = 1.0  # first relaunch backoff; doubles per failure, capped
RELAUNCH_CAP = 60.0
CRAWLER_STATE = {
    "running": S.RUNNING,
    "pending-wait": S.PENDING_WAIT,
    "generate-wacz": S.GENERATE_WACZ, "generate-cdx": S.GENERATE_WACZ,
    "generate-warc": S.GENERATE_WACZ, "uploading-wacz": S.GENERATE_WACZ,
}
# Exits that count against ARCHIVER_MAX_LAUNCH_ATTEMPTS. Redis, the disk or the bucket going away, a
# runner dying or archiver removing an instance are not failures of the crawler.
FAILED_ATTEMPT = (ExitReason.CRASH, ExitReason.OOM, ExitReason.UNREPORTED)
# What a crawler reports before it exits 0 (crawler-protocol.md); anything else is no success.
REPORTED_EXIT = ("done", "canceled", "interrupted")
ALL_FAILED = "every crawler instance failed"  # finish() adds the crawler's own words
ENDED = "ended"  # decide_outcome(): exited unreported while its crawl stops; not relaunched
FLAG_FOR_INTENT = {Intent.CANCEL: Flag.CANCELED, Intent.STOP: Flag.STOPPING, Intent.PAUSE: Flag.PAUSED}


# --- exits, backoff, outcome ------------------------------------------------------------


def classify_exit(code: int | None, oom: bool = False, status: str | None = None) -> str:
    """What an instance's exit code means (crawler-protocol.md, "Exit codes"), with the status
    it left in `<id>:status` (docs/crawlers.md; "" = none, None = unknown: Redis was away).

    137 without the engine's OOM flag is a kill, not an out-of-memory: a crash. Under
    --restartsOnError the real crawler ends a fatal error with exit 0 and status `failed`:
    permanent, as 17 is. 9 is "the crawl ended and no page succeeded". An exit 0 that left no
    final status is a failed attempt, not a success: relaunching it as one loops for ever.
    """
    if code is None:
        return ExitReason.CRASH
    if oom:
        return ExitReason.OOM
    if code == 0 and status == "failed":
        return ExitReason.PERMANENT
    if code == 0 and status is not None and status not in REPORTED_EXIT:
        return ExitReason.UNREPORTED
    return {
        0: ExitReason.DONE, 3: ExitReason.DISK, 8: ExitReason.REDIS, 11: ExitReason.INTERRUPTED,
        13: ExitReason.INTERRUPTED, 4: ExitReason.PERMANENT, 17: ExitReason.PERMANENT,
        9: ExitReason.NO_PAGE, 14: ExitReason.LIMIT, 15: ExitReason.LIMIT, 16: ExitReason.DISK,
        22: ExitReason.STORAGE,
    }.get(code, ExitReason.CRASH)


def fatal_line(log_tail: str) -> str:
    """The message of the last fatal line of a crawler's log (browsertrix-crawler's JSON lines:
    `{"logLevel": "fatal", "message": ...}`), or ""."""
    for line in reversed(log_tail.splitlines()):
        line = line.strip()
        if not line.startswith("{") or '"fatal"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and str(entry.get("logLevel", "")).lower() == "fatal":
            return str(entry.get("message", ""))[:1000]
    return ""


def relaunch_delay(failures: int) -> float:
    """Backoff before the next launch of an instance that failed `failures` times."""
    return 0.0 if failures <= 0 else min(RELAUNCH_BASE * 2 ** (failures - 1), RELAUNCH_CAP)


def failures_of(history: list[tuple]) -> int:
    """Failed attempts among an instance's history, rows of (exit_reason, ...)."""
    return sum(1 for reason, *_rest in history if reason in FAILED_ATTEMPT)


@dataclass(frozen=True)
class Outcome:
    status: str
    stop_reason: str = ""
    error: str = ""


def decide_outcome(statuses: list[str | None], *, intent: str, stop_reason: str,
                   pages_done: int, pages_found: int, has_files: bool,
                   failed_pages_session: bool = False) -> Outcome | None:
    """How a crawl ends, from its instances' statuses (one per expected instance); None = not yet.

    crawler-protocol.md: finished when every instance is done or failed; at least one done
    is a success (or the stop reason's state); none done is a failure, or canceled when a
    stop was asked for before any page was done. A pause ends when every instance is
    interrupted (or done). `ENDED` is an instance of a stopping crawl that exited without a
    final status and is not launched again: it counts as done when the crawl archived pages
    (a WACZ kept, or WARCs its folder holds, which the end of the crawl keeps).
    A failed-pages session that archived nothing new leaves the crawl with what it had.
    """
    if not statuses or any(s is None for s in statuses):
        return None
    if intent == Intent.PAUSE and set(statuses) <= {"interrupted", "done"} and "interrupted" in statuses:
        return Outcome(S.PAUSED)
    if not set(statuses) <= {*FINISHED_STATUSES, ENDED}:
        return None
    if intent == Intent.CANCEL or "canceled" in statuses:
        return Outcome(S.CANCELED, StopReason.USER)
    if "done" in statuses or (ENDED in statuses and (has_files or pages_done)):
        if pages_found == 1 and not has_files:
            return Outcome(S.FAILED, stop_reason, "the crawl found one page and produced no archive")
        return Outcome(STOPPED_STATE.get(stop_reason, S.COMPLETE), stop_reason)
    if (intent == Intent.STOP or stop_reason) and pages_done == 0:
        return Outcome(S.CANCELED, stop_reason or StopReason.USER)
    if failed_pages_session and pages_done and has_files:
        return Outcome(S.COMPLETE)
    return Outcome(S.FAILED, stop_reason, ALL_FAILED)


def crawl_state_for(statuses: list[str]) -> str | None:
    """The crawl state its instances' crawler statuses add up to (the least advanced).

    The real crawler sets `pending-wait` while an instance shuts down, on every stop, pause
    and finish: with one instance that is not "waiting for the others", and the crawl keeps
    its state.
    """
    if len(statuses) == 1 and statuses[0] == "pending-wait":
        return None
    states = [CRAWLER_STATE[s] for s in statuses if s in CRAWLER_STATE]
    for state in (S.RUNNING, S.GENERATE_WACZ, S.PENDING_WAIT):
        if state in states:
            return state
    return None


# --- actions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fail:
    error: str
    stop_reason: str = ""


@dataclass(frozen=True)
class RedisDown:
    what: str


@dataclass(frozen=True)
class RedisBack:
    pass


@dataclass(frozen=True)
class Corrupt:
    message: str


@dataclass(frozen=True)
class Ingest:
    pass  # pages, error lines and failed pages of the observation, drained further if more


@dataclass(frozen=True)
class RecordProgress:
    values: dict = field(hash=False)


@dataclass(frozen=True)
class PauseForDisk:
    reason: str


@dataclass(frozen=True)
class LimitStop:
    reason: str


@dataclass(frozen=True)
class CutOff:
    """Over its Redis budget: its crawlers lose Redis at once and the crawl ends."""


@dataclass(frozen=True)
class RecordUserStop:
    pass


@dataclass(frozen=True)
class SetFlag:
    flag: Flag


@dataclass(frozen=True)
class ClearFlag:
    flag: Flag


@dataclass(frozen=True)
class SendMessages:
    pass


@dataclass(frozen=True)
class StopOne:
    instance: int


@dataclass(frozen=True)
class MarkStarted:
    process: Process = field(hash=False)


@dataclass(frozen=True)
class HandleExit:
    process: Process = field(hash=False)
    code: int | None
    oom: bool = False
    status: str | None = None  # its crawler status as it exited: "" none, None unknown


@dataclass(frozen=True)
class EngineState:
    down: bool


@dataclass(frozen=True)
class CountTime:
    pass


@dataclass(frozen=True)
class CancelTimeout:
    pass


@dataclass(frozen=True)
class Launch:
    instance: int
    pending: Process | None = field(default=None, hash=False)
    due: bool = True


@dataclass(frozen=True)
class DropPending:
    process: Process = field(hash=False)  # a relaunch waiting for its backoff; the crawl ends


@dataclass(frozen=True)
class Finish:
    outcome: Outcome


@dataclass(frozen=True)
class FollowState:
    state: str


@dataclass(frozen=True)
class Stalled:
    pass


@dataclass(frozen=True)
class Policy:
    """The settings decisions depend on."""

    redis_grace: float
    corrupt_grace: float
    cancel_grace: float
    count_every: float
    stall_minutes: float


# --- the plan ---------------------------------------------------------------------------


def first_round(obs, held, policy: Policy) -> list:
    """Progress in, commands out, instances checked: everything that does not need the
    instances' statuses as they are after this round's exits."""
    if obs.fault is not None:
        return fault_actions(obs, held, policy) + instance_actions(obs, held, policy)
    actions: list = [RedisBack()] if held.redis_down_since or held.corrupt_since else []
    actions += [Ingest(), RecordProgress(obs.progress_values)]
    actions += command_actions(obs, held)
    actions += instance_actions(obs, held, policy)
    if held.canceled_at and (obs.now - held.canceled_at).total_seconds() >= policy.cancel_grace:
        actions.append(CancelTimeout())
    return actions


def fault_actions(obs, held, policy: Policy) -> list:
    """Redis unreachable, or its data for this crawl unreadable: wait, then fail."""
    kind, what = obs.fault
    since = held.redis_down_since if kind == "unreachable" else held.corrupt_since
    waited = (obs.now - since).total_seconds() if since else 0.0
    if kind == "unreachable":
        if since and waited >= policy.redis_grace:
            return [Fail(f"Redis was unreachable for {policy.redis_grace:g} s")]
        return [RedisDown(what)]
    if since and waited >= policy.corrupt_grace:
        return [Fail(f"its progress data in Redis cannot be read: {what}")]
    return [Corrupt(what)]


def command_actions(obs, held) -> list:
    """Intents, limits and the disk become Redis commands, each sent once per lease."""
    crawl, actions = obs.crawl, []
    if obs.limit_reason == StopReason.REDIS_BUDGET:
        return [CutOff()]  # asked to stop, a hostile crawler would fill the server meanwhile
    if obs.disk_reason and not crawl.intent and crawl.status in S.RUNNING_STATES:
        actions.append(PauseForDisk(obs.disk_reason))
    elif obs.limit_reason and crawl.intent != Intent.CANCEL and not crawl.stop_reason:
        actions.append(LimitStop(obs.limit_reason))
    intent = Intent.PAUSE if any(isinstance(a, PauseForDisk) for a in actions) else crawl.intent
    if any(isinstance(a, LimitStop) for a in actions):
        intent = Intent.STOP
    if crawl.intent == Intent.STOP and not crawl.stop_reason:
        actions.append(RecordUserStop())
    wanted = FLAG_FOR_INTENT.get(intent)
    if wanted and wanted not in held.flags:
        actions.append(SetFlag(wanted))
    # A resumed crawl that waited (or was paused before): make sure it is not paused.
    if intent != Intent.PAUSE and (Flag.PAUSED in held.flags or crawl.status in (S.STARTING, S.WAITING_CAPACITY)):
        actions.append(ClearFlag(Flag.PAUSED))
    if obs.messages:
        actions.append(SendMessages())
    for i, status in obs.instance_statuses.items():
        if i >= crawl.scale and i not in held.stopping_instances and status not in FINISHED_STATUSES:
            actions.append(StopOne(i))
    return actions


def instance_actions(obs, held, policy: Policy) -> list:
    """Exits to record, rows now running, the engine's state, time to count."""
    actions: list = []
    statuses = obs.instance_statuses
    for process in obs.processes:
        if process.started_at is None:
            continue
        if process.pk not in obs.instances:
            continue  # the engine did not answer for it: nothing is known
        instance = obs.instances[process.pk]
        if instance is not None and instance.running:
            if process.status == ProcessStatus.STARTING:
                actions.append(MarkStarted(process))
            continue
        status = None if obs.progress is None else statuses.get(process.instance, "")
        actions.append(HandleExit(process, instance.exit_code if instance else None,
                                  bool(instance and instance.oom), status))
    exited = any(isinstance(a, HandleExit) for a in actions)
    if exited or held.counted_at is None or \
            (obs.now - held.counted_at).total_seconds() >= policy.count_every:
        actions.append(CountTime())
    actions.append(EngineState(obs.engine_down))
    return actions


def second_round(obs, held, policy: Policy) -> list:
    """With the statuses as they are now: launch what is missing, or finish, or follow."""
    crawl = obs.crawl
    if obs.fault is not None or obs.engine_down:
        return []
    statuses = obs.instance_statuses
    live = [p for p in obs.processes if p.is_live]
    dropped = [DropPending(p) for p in live if p.started_at is None and is_ending(crawl)]
    live = [p for p in live if p.started_at is not None or not is_ending(crawl)]
    launches = launch_actions(obs, live)
    if not live and not launches:
        ending = [statuses.get(i) for i in range(crawl.scale)]
        if is_ending(crawl):  # nothing more is launched: an instance that has not reported has ended
            ending = [s if s in FINISHED_STATUSES else ENDED for s in ending]
        outcome = decide_outcome(
            ending, intent=crawl.intent, stop_reason=crawl.stop_reason, pages_done=crawl.pages_done,
            pages_found=crawl.pages_found, has_files=obs.has_files,
            failed_pages_session=bool(crawl.config_override))
        if outcome:
            return [*dropped, Finish(outcome)]
    actions: list = [*dropped, *launches]
    state = crawl_state_for([statuses.get(i, "") for i in range(crawl.scale)]) if (live or launches) else None
    if state and state != crawl.status and crawl.status in (*S.RUNNING_STATES, S.WAITING_CAPACITY):
        actions.append(FollowState(state))
    if crawl.is_stalled(obs.now, policy.stall_minutes):
        actions.append(Stalled())
    return actions


def is_ending(crawl) -> bool:
    """Stopping or canceled: it has started and gets no new instance, whatever its crawlers
    did (a relaunch would crawl on past the stop, or loop for ever on a crawler that
    never reports)."""
    return crawl.status != S.STARTING and (crawl.intent in (Intent.STOP, Intent.CANCEL)
                                           or bool(crawl.stop_reason))


def launch_actions(obs, live: list[Process]) -> list[Launch]:
    """Every instance that should run and does not: new, relaunched after an exit, resumed.
    A pending row (its backoff runs) is launched once due; none while the crawl is ending."""
    crawl, actions = obs.crawl, []
    if is_ending(crawl):
        return []
    for i in range(crawl.scale):
        status = obs.instance_statuses.get(i)
        if status in FINISHED_STATUSES or (status == "interrupted" and crawl.intent == Intent.PAUSE):
            continue
        mine = [p for p in live if p.instance == i]
        pending = next((p for p in mine if p.started_at is None), None)
        if mine and pending is None:
            continue
        due = pending is None or pending.retry_at is None or pending.retry_at <= obs.now
        actions.append(Launch(i, pending, due))  # not due: its backoff runs, it counts as live
    return actions
