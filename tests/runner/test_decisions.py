"""The runner's pure decisions: exit codes, outcomes, backoff, crawl state, and the plan of
actions: every action type of runner/decide.py in a situation built by hand that calls for it."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from crawls.models import (
    Crawl,
    CrawlStatus,
    ExitReason,
    Intent,
    Process,
    ProcessStatus,
    elapsed_with_uncounted,
)
from runner import decide
from runner.daemon import classify_exit, crawl_state_for, decide_outcome, relaunch_delay
from runner.decide import fatal_line
from runner.observe import Observation
from runner.progress import Flag, Progress
from runner.state import Held
from tests.runner.situations import POLICY, T0, at, crawl, held, message, observed, process

S = CrawlStatus
t0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(("code", "oom", "reason"), [
    (0, False, ExitReason.DONE),
    (137, False, ExitReason.CRASH),  # killed, but not by the OOM killer (Docker's flag says)
    (137, True, ExitReason.OOM),
    (1, True, ExitReason.OOM),
    (11, False, ExitReason.INTERRUPTED),
    (13, False, ExitReason.INTERRUPTED),
    (4, False, ExitReason.PERMANENT),
    (17, False, ExitReason.PERMANENT),
    (14, False, ExitReason.LIMIT),
    (15, False, ExitReason.LIMIT),
    (16, False, ExitReason.DISK),
    (3, False, ExitReason.DISK),
    (1, False, ExitReason.CRASH),
    (8, False, ExitReason.REDIS),
    (22, False, ExitReason.STORAGE),  # its WACZ could not be uploaded: the bucket's fault
    (None, False, ExitReason.CRASH),
])
def test_exit_codes_are_classified_as_the_protocol_says(code, oom, reason):
    assert classify_exit(code, oom) == reason


@pytest.mark.parametrize(("status", "reason"), [
    ("", ExitReason.UNREPORTED), ("running", ExitReason.UNREPORTED),
    ("pending-wait", ExitReason.UNREPORTED), ("canceled", ExitReason.DONE),
    ("interrupted", ExitReason.DONE), (None, ExitReason.DONE),  # None: Redis away, not known
])
def test_an_exit_0_without_a_final_status_is_a_failed_attempt(status, reason):
    assert classify_exit(0, False, status) == reason
    assert (reason in decide.FAILED_ATTEMPT) == (reason == ExitReason.UNREPORTED)


@pytest.mark.parametrize(("code", "status", "reason"), [
    (0, "failed", ExitReason.PERMANENT),  # a fatal error under --restartsOnError
    (0, "done", ExitReason.DONE),
    (9, "failed", ExitReason.NO_PAGE),  # no page succeeded: not a crash
    (9, None, ExitReason.NO_PAGE),
    (11, "interrupted", ExitReason.INTERRUPTED),
    (1, "failed", ExitReason.CRASH),
])
def test_the_crawler_status_an_instance_left_labels_its_exit(code, status, reason):
    assert classify_exit(code, False, status) == reason


def test_the_last_fatal_line_of_a_crawler_log_is_found():
    tail = "\n".join([
        '{"logLevel":"info","message":"Seeds: 1"}',
        '{"logLevel":"fatal","context":"general","message":"No valid seeds. Quitting"}',
        '{"logLevel":"info","message":"Exiting, Crawl status: failed"}',
        "not json with \"fatal\" in it",
    ])
    assert fatal_line(tail) == "No valid seeds. Quitting"
    assert fatal_line('{"logLevel":"error","message":"fatal-ish"}\nplain fatal text') == ""


def outcome(statuses, intent="", stop_reason="", done=5, found=5, files=True, retry=False):
    return decide_outcome(statuses, intent=intent, stop_reason=stop_reason, pages_done=done,
                          pages_found=found, has_files=files, failed_pages_session=retry)


@pytest.mark.parametrize(("statuses", "kwargs", "expected"), [
    (["done"], {}, S.COMPLETE),
    (["done", "failed"], {}, S.COMPLETE),
    (["done", "running"], {}, None),
    (["done", None], {}, None),
    ([], {}, None),
    (["failed", "failed"], {}, S.FAILED),
    (["failed"], {"intent": Intent.STOP, "stop_reason": "user", "done": 0}, S.CANCELED),
    (["failed"], {"intent": Intent.STOP, "stop_reason": "user", "done": 2}, S.FAILED),
    (["done"], {"stop_reason": "user", "intent": Intent.STOP}, S.STOPPED_BY_USER),
    (["done"], {"stop_reason": "time_limit"}, S.STOPPED_TIME_LIMIT),
    (["done"], {"stop_reason": "size_limit"}, S.STOPPED_SIZE_LIMIT),
    (["done"], {"stop_reason": "page_limit"}, S.STOPPED_PAGE_LIMIT),
    (["done"], {"stop_reason": "storage_quota"}, S.STOPPED_QUOTA_REACHED),
    (["done"], {"stop_reason": "exec_quota"}, S.STOPPED_QUOTA_REACHED),
    (["canceled"], {"intent": Intent.CANCEL}, S.CANCELED),
    (["done", "canceled"], {}, S.CANCELED),
    (["done"], {"found": 1, "done": 1, "files": False}, S.FAILED),
    (["done"], {"found": 1, "done": 1, "files": True}, S.COMPLETE),
    (["interrupted", "interrupted"], {"intent": Intent.PAUSE}, S.PAUSED),
    (["interrupted", "done"], {"intent": Intent.PAUSE}, S.PAUSED),
    (["interrupted", "running"], {"intent": Intent.PAUSE}, None),
    (["interrupted"], {}, None),
    ([decide.ENDED], {"intent": Intent.STOP, "stop_reason": "user"}, S.STOPPED_BY_USER),
    ([decide.ENDED], {"stop_reason": "size_limit", "files": False}, S.STOPPED_SIZE_LIMIT),
    ([decide.ENDED], {"intent": Intent.STOP, "stop_reason": "user", "done": 0, "files": False}, S.CANCELED),
    ([decide.ENDED], {"intent": Intent.CANCEL}, S.CANCELED),
    (["failed"], {"retry": True}, S.COMPLETE),  # a failed-pages session: the crawl keeps its pages
    (["failed"], {"retry": True, "files": False}, S.FAILED),
])
def test_the_outcome_is_read_from_the_instances_statuses(statuses, kwargs, expected):
    result = outcome(statuses, **kwargs)
    assert (result.status if result else None) == expected


def test_a_failure_says_why():
    assert outcome(["failed"]).error == "every crawler instance failed"
    assert "one page" in outcome(["done"], found=1, done=1, files=False).error


def test_relaunch_backoff_doubles_and_is_capped():
    assert [relaunch_delay(n) for n in range(5)] == [0, 1, 2, 4, 8]
    assert relaunch_delay(30) == 60


@pytest.mark.parametrize(("statuses", "state"), [
    (["running", "pending-wait"], S.RUNNING),
    (["generate-wacz", "pending-wait"], S.GENERATE_WACZ),
    (["uploading-wacz"], S.GENERATE_WACZ),
    (["pending-wait", "done"], S.PENDING_WAIT),
    (["done"], None),
    (["pending-wait"], None),  # one instance shutting down: not waiting for the others
])
def test_the_crawl_state_follows_the_least_advanced_instance(statuses, state):
    assert crawl_state_for(statuses) == state


# --- the plan: observation -> actions, with a pinned clock and no Redis ------------------


def observation(crawl, now, **fields):
    return Observation(crawl=crawl, now=now, processes=fields.pop("processes", []), **fields)


def test_redis_unreachable_is_a_wait_then_a_failure_after_the_grace():
    rules = decide.Policy(redis_grace=60, corrupt_grace=30, cancel_grace=30, count_every=15,
                          stall_minutes=15)
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=1)
    held = Held(token=1, renewed_at=t0)
    obs = observation(crawl, t0, fault=("unreachable", "ConnectionError"))
    assert decide.first_round(obs, held, rules)[0] == decide.RedisDown("ConnectionError")
    held.redis_down_since = t0
    later = observation(crawl, t0 + dt.timedelta(seconds=61), fault=("unreachable", "ConnectionError"))
    assert decide.first_round(later, held, rules)[0] == decide.Fail("Redis was unreachable for 60 s")
    corrupt = observation(crawl, t0, fault=("corrupt", "key x:d holds 'abc'"))
    assert decide.first_round(corrupt, held, rules)[0] == decide.Corrupt("key x:d holds 'abc'")
    assert decide.second_round(corrupt, held, rules) == []  # nothing launched or finished blind


def test_a_full_disk_pauses_and_a_limit_stops_each_command_once():
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=1)
    held = Held(token=1, renewed_at=t0)
    obs = observation(crawl, t0, progress=Progress(), disk_reason="waiting: disk 95 % full")
    actions = decide.command_actions(obs, held)
    assert decide.PauseForDisk("waiting: disk 95 % full") in actions and decide.SetFlag(Flag.PAUSED) in actions
    obs = observation(crawl, t0, progress=Progress(), limit_reason="time_limit")
    assert decide.command_actions(obs, held) == [decide.LimitStop("time_limit"), decide.SetFlag(Flag.STOPPING)]
    held.flags.add(Flag.STOPPING)
    crawl.stop_reason, crawl.intent = "time_limit", Intent.STOP
    assert decide.command_actions(obs, held) == []


def test_instances_to_launch_skip_finished_ones_and_wait_for_their_backoff():
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=3)
    pending = Process(pk=9, instance=2, status=ProcessStatus.STARTING, retry_at=t0 + dt.timedelta(seconds=4))
    statuses = {f"crawl-{crawl.pk}-0": "done", f"crawl-{crawl.pk}-1": "running"}
    obs = observation(crawl, t0, progress=Progress(statuses=statuses), processes=[pending])
    launches = decide.launch_actions(obs, [pending])
    assert [(a.instance, a.due) for a in launches] == [(1, True), (2, False)]


def test_elapsed_time_includes_what_runs_but_is_not_counted_yet():
    running = Process(status=ProcessStatus.RUNNING, started_at=t0, counted_until=t0 + dt.timedelta(seconds=5))
    assert elapsed_with_uncounted(5.0, [running], t0 + dt.timedelta(seconds=9)) == 9.0


@pytest.mark.parametrize("ending", [{"intent": Intent.CANCEL}, {"intent": Intent.STOP, "stop_reason": "user"},
                                    {"stop_reason": "size_limit"}, {"stop_reason": "time_limit"}])
def test_an_ending_crawl_gets_no_new_instance_and_its_waiting_relaunch_is_dropped(ending):
    rules = decide.Policy(redis_grace=60, corrupt_grace=30, cancel_grace=30, count_every=15,
                          stall_minutes=15)
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=2, pages_done=3, **ending)
    pending = Process(pk=9, instance=1, status=ProcessStatus.STARTING, retry_at=t0)
    obs = observation(crawl, t0, progress=Progress(statuses={f"crawl-{crawl.pk}-0": "running"}),
                      processes=[pending], has_files=True)
    assert decide.launch_actions(obs, [pending]) == []
    actions = decide.second_round(obs, Held(token=1, renewed_at=t0), rules)
    assert [type(a) for a in actions] == [decide.DropPending, decide.Finish]
    assert actions[1].outcome.status == (S.CANCELED if ending.get("intent") == Intent.CANCEL
                                         else decide.STOPPED_STATE[ending["stop_reason"]])


def test_a_running_crawl_relaunches_an_instance_that_exited():
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=1)
    obs = observation(crawl, t0, progress=Progress(statuses={f"crawl-{crawl.pk}-0": "running"}))
    assert decide.launch_actions(obs, []) == [decide.Launch(0, None, True)]


# --- every action type, in the situation that calls for it and in a near one that does not ---
# Situations are built by hand (tests/runner/situations.py): unsaved rows, no Redis, no engine.


def first(obs, known) -> list:
    return decide.first_round(obs, known, POLICY)


def second(obs, known) -> list:
    return decide.second_round(obs, known, POLICY)


def of_type(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def test_fail_when_redis_stays_unreachable_or_unreadable_past_its_grace_and_not_before():
    c = crawl()
    away = ("unreachable", "ConnectionError")
    assert first(observed(c, now=at(60), fault=away), held(redis_down_since=T0))[0] == \
        decide.Fail("Redis was unreachable for 60 s")
    assert of_type(first(observed(c, now=at(59), fault=away), held(redis_down_since=T0)), decide.Fail) == []
    torn = ("corrupt", "key x:d holds 'abc'")
    assert first(observed(c, now=at(30), fault=torn), held(corrupt_since=T0))[0] == \
        decide.Fail("its progress data in Redis cannot be read: key x:d holds 'abc'")
    assert of_type(first(observed(c, now=at(29), fault=torn), held(corrupt_since=T0)), decide.Fail) == []


def test_redis_down_is_a_wait_when_redis_does_not_answer_and_nothing_when_it_does():
    c = crawl()
    actions = first(observed(c, fault=("unreachable", "TimeoutError")), held())
    assert decide.RedisDown("TimeoutError") in actions
    assert of_type(actions, decide.Ingest) == []  # nothing to read, nothing recorded
    assert of_type(first(observed(c, "running"), held()), decide.RedisDown) == []


def test_redis_back_once_it_answers_after_a_fault_and_not_when_there_was_none():
    c = crawl()
    assert first(observed(c, "running"), held(redis_down_since=T0))[0] == decide.RedisBack()
    assert first(observed(c, "running"), held(corrupt_since=T0))[0] == decide.RedisBack()
    assert of_type(first(observed(c, "running"), held()), decide.RedisBack) == []


def test_corrupt_is_a_wait_within_its_grace_and_a_failure_after():
    c = crawl()
    torn = ("corrupt", "key x:s holds a string")
    assert first(observed(c, now=at(29), fault=torn), held(corrupt_since=T0))[0] == \
        decide.Corrupt("key x:s holds a string")
    assert of_type(first(observed(c, now=at(30), fault=torn), held(corrupt_since=T0)), decide.Corrupt) == []
    assert of_type(first(observed(c, "running"), held()), decide.Corrupt) == []


def test_ingest_and_record_progress_when_redis_answered_and_not_when_it_did_not():
    c = crawl()
    values = {"pages_done": 3, "pages_found": 7}
    actions = first(observed(c, "running", progress_values=values), held())
    assert actions[:2] == [decide.Ingest(), decide.RecordProgress(values)]
    blind = first(observed(c, fault=("unreachable", "ConnectionError")), held())
    assert of_type(blind, decide.Ingest) == [] and of_type(blind, decide.RecordProgress) == []


def test_pause_for_disk_when_the_disk_fills_under_a_running_crawl_and_not_under_one_a_user_paused():
    full = "waiting: disk 95 % full"
    actions = decide.command_actions(observed(crawl(), "running", disk_reason=full), held())
    assert actions == [decide.PauseForDisk(full), decide.SetFlag("paused")]
    paused = crawl(intent=Intent.PAUSE)
    assert of_type(decide.command_actions(observed(paused, "running", disk_reason=full), held()),
                   decide.PauseForDisk) == []
    assert of_type(decide.command_actions(observed(crawl(S.PAUSED), disk_reason=full), held()),
                   decide.PauseForDisk) == []


def test_limit_stop_when_a_limit_is_reached_and_not_once_its_stop_is_recorded_or_on_a_cancel():
    actions = decide.command_actions(observed(crawl(), "running", limit_reason="page_limit"), held())
    assert actions == [decide.LimitStop("page_limit"), decide.SetFlag("stopping")]
    stopped = crawl(intent=Intent.STOP, stop_reason="page_limit")
    assert of_type(decide.command_actions(observed(stopped, "running", limit_reason="page_limit"), held()),
                   decide.LimitStop) == []
    canceled = crawl(intent=Intent.CANCEL)
    assert of_type(decide.command_actions(observed(canceled, "running", limit_reason="page_limit"), held()),
                   decide.LimitStop) == []


def test_cut_off_and_nothing_else_when_a_crawl_is_over_its_redis_budget_even_while_it_stops():
    for stopping in (crawl(), crawl(intent=Intent.STOP, stop_reason="page_limit")):
        obs = observed(stopping, "running", limit_reason="redis_budget")
        assert decide.command_actions(obs, held()) == [decide.CutOff()]


def test_record_user_stop_when_a_user_asked_for_a_stop_and_not_once_a_reason_is_recorded():
    asked = crawl(intent=Intent.STOP)
    assert decide.RecordUserStop() in decide.command_actions(observed(asked, "running"), held())
    recorded = crawl(intent=Intent.STOP, stop_reason="user")
    assert of_type(decide.command_actions(observed(recorded, "running"), held()), decide.RecordUserStop) == []


@pytest.mark.parametrize(("intent", "flag"), [(Intent.CANCEL, "canceled"), (Intent.STOP, "stopping"),
                                              (Intent.PAUSE, "paused")])
def test_set_flag_sends_an_intent_once_per_lease(intent, flag):
    c = crawl(intent=intent)
    assert decide.SetFlag(flag) in decide.command_actions(observed(c, "running"), held())
    assert of_type(decide.command_actions(observed(c, "running"), held(flags={flag})), decide.SetFlag) == []
    assert of_type(decide.command_actions(observed(crawl(), "running"), held()), decide.SetFlag) == []


def test_clear_flag_unpauses_a_resumed_crawl_and_leaves_a_paused_one_paused():
    resumed = crawl()
    assert decide.ClearFlag("paused") in decide.command_actions(observed(resumed, "running"),
                                                                held(flags={"paused"}))
    # A crawl that waited for room may hold a pause from before it waited.
    assert decide.ClearFlag("paused") in decide.command_actions(observed(crawl(S.STARTING)), held())
    still_paused = crawl(intent=Intent.PAUSE)
    assert of_type(decide.command_actions(observed(still_paused, "running"), held(flags={"paused"})),
                   decide.ClearFlag) == []
    assert of_type(decide.command_actions(observed(resumed, "running"), held()), decide.ClearFlag) == []


def test_send_messages_when_messages_wait_and_not_when_none_do():
    c = crawl()
    assert decide.SendMessages() in decide.command_actions(observed(c, "running", messages=[message(c)]), held())
    assert of_type(decide.command_actions(observed(c, "running"), held()), decide.SendMessages) == []


def test_stop_one_for_an_instance_above_the_scale_that_still_works_once():
    scaled_down = crawl(scale=1)
    assert decide.StopOne(1) in decide.command_actions(observed(scaled_down, "running", "running"), held())
    assert of_type(decide.command_actions(observed(scaled_down, "running", "running"),
                                          held(stopping_instances={1})), decide.StopOne) == []
    assert of_type(decide.command_actions(observed(scaled_down, "running", "done"), held()),
                   decide.StopOne) == []
    assert of_type(decide.command_actions(observed(crawl(scale=2), "running", "running"), held()),
                   decide.StopOne) == []


def test_mark_started_when_a_starting_row_s_instance_runs_and_not_for_a_row_already_running():
    starting = process(status=ProcessStatus.STARTING)
    assert decide.MarkStarted(starting) in first(observed(crawl(), rows=(starting,), running=(starting,)), held())
    running = process()
    assert of_type(first(observed(crawl(), "running", rows=(running,), running=(running,)), held()),
                   decide.MarkStarted) == []


def test_handle_exit_for_an_instance_that_ended_and_not_for_one_that_runs_or_is_unknown():
    row = process()
    ended = first(observed(crawl(), "done", rows=(row,), exited=((row, 0, False),)), held())
    assert decide.HandleExit(row, 0, False, "done") in ended
    killed = first(observed(crawl(), "running", rows=(row,), exited=((row, 137, True),)), held())
    assert decide.HandleExit(row, 137, True, "running") in killed
    blind = first(observed(crawl(), rows=(row,), exited=((row, 0, False),),
                           fault=("unreachable", "ConnectionError")), held())
    assert decide.HandleExit(row, 0, False, None) in blind  # its status unknown, not "none"
    assert of_type(first(observed(crawl(), "running", rows=(row,), running=(row,)), held()),
                   decide.HandleExit) == []
    # The engine did not answer for it (absent from the instances): nothing is known.
    assert of_type(first(observed(crawl(), "running", rows=(row,)), held()), decide.HandleExit) == []
    never_started = process(started_at=None, status=ProcessStatus.STARTING)
    assert of_type(first(observed(crawl(), rows=(never_started,), exited=((never_started, 1, False),)), held()),
                   decide.HandleExit) == []


def test_engine_state_says_whether_the_engine_answered():
    assert decide.EngineState(True) in first(observed(crawl(), "running", engine_down=True), held())
    answered = first(observed(crawl(), "running"), held())
    assert decide.EngineState(False) in answered and decide.EngineState(True) not in answered


def test_count_time_every_interval_and_at_every_exit_and_not_in_between():
    row = process()
    c = crawl()
    assert decide.CountTime() in first(observed(c, "running", now=at(15), rows=(row,), running=(row,)), held())
    assert decide.CountTime() in first(observed(c, "running", rows=(row,), running=(row,)), held(counted_at=None))
    assert decide.CountTime() in first(observed(c, "done", now=at(1), rows=(row,), exited=((row, 0, False),)),
                                       held())
    assert of_type(first(observed(c, "running", now=at(14), rows=(row,), running=(row,)), held()),
                   decide.CountTime) == []


def test_cancel_timeout_when_a_cancel_was_not_obeyed_within_its_grace_and_not_before():
    c = crawl(intent=Intent.CANCEL)
    assert decide.CancelTimeout() in first(observed(c, "running", now=at(30)),
                                           held(canceled_at=T0, flags={"canceled"}))
    assert of_type(first(observed(c, "running", now=at(29)), held(canceled_at=T0, flags={"canceled"})),
                   decide.CancelTimeout) == []
    assert of_type(first(observed(crawl(), "running", now=at(30)), held()), decide.CancelTimeout) == []


def test_launch_an_instance_without_a_live_row_and_none_beside_one_that_runs():
    assert second(observed(crawl(), "running"), held()) == [decide.Launch(0, None, True)]
    row = process()
    assert of_type(second(observed(crawl(), "running", rows=(row,), running=(row,)), held()), decide.Launch) == []
    waiting = process(started_at=None, status=ProcessStatus.STARTING, retry_at=at(4))
    assert second(observed(crawl(), "running", rows=(waiting,)), held()) == [decide.Launch(0, waiting, False)]
    assert second(observed(crawl(), "running", now=at(4), rows=(waiting,)), held()) == \
        [decide.Launch(0, waiting, True)]
    # A paused crawl's interrupted instance waits for its resume.
    assert second(observed(crawl(intent=Intent.PAUSE), "interrupted", "running", rows=(process(1),),
                           running=(process(1),)), held()) == []


def test_drop_pending_when_the_crawl_ends_and_launch_the_waiting_row_when_it_does_not():
    waiting = process(started_at=None, status=ProcessStatus.STARTING, retry_at=at(4))
    stopping = crawl(intent=Intent.STOP, stop_reason="user", pages_done=3)
    actions = second(observed(stopping, "running", rows=(waiting,), has_files=True), held())
    assert actions == [decide.DropPending(waiting), decide.Finish(decide.Outcome(S.STOPPED_BY_USER, "user"))]
    going_on = second(observed(crawl(), "running", rows=(waiting,)), held())
    assert of_type(going_on, decide.DropPending) == [] and going_on == [decide.Launch(0, waiting, False)]


def test_finish_when_every_instance_is_done_and_not_while_one_still_runs():
    done = crawl(pages_done=5, pages_found=5)
    assert second(observed(done, "done", has_files=True), held()) == [decide.Finish(decide.Outcome(S.COMPLETE))]
    row = process(1)
    working = crawl(scale=2, pages_done=5, pages_found=9)
    assert of_type(second(observed(working, "done", "running", rows=(row,), running=(row,)), held()),
                   decide.Finish) == []
    assert of_type(second(observed(done, "done", engine_down=True), held()), decide.Finish) == []


def test_follow_state_when_the_crawlers_move_on_and_not_when_the_crawl_is_there_already():
    row = process()
    assert decide.FollowState(S.GENERATE_WACZ) in second(
        observed(crawl(), "generate-wacz", rows=(row,), running=(row,)), held())
    assert of_type(second(observed(crawl(S.GENERATE_WACZ), "generate-wacz", rows=(row,), running=(row,)), held()),
                   decide.FollowState) == []
    assert of_type(second(observed(crawl(S.PAUSED), "generate-wacz", rows=(row,), running=(row,)), held()),
                   decide.FollowState) == []


def test_stalled_after_the_stall_minutes_without_a_page_and_not_a_second_before():
    row = process()
    c = crawl(progress_at=T0)
    assert decide.Stalled() in second(observed(c, "running", now=at(15 * 60), rows=(row,), running=(row,)), held())
    assert of_type(second(observed(c, "running", now=at(15 * 60 - 1), rows=(row,), running=(row,)), held()),
                   decide.Stalled) == []


NOT_ACTIONS = {"Outcome", "Policy"}  # what Finish carries, and the settings decisions read
ACTION_TYPES = sorted(name for name, value in vars(decide).items()
                      if isinstance(value, type) and dataclasses.is_dataclass(value)
                      and value.__module__ == decide.__name__ and name not in NOT_ACTIONS)


def test_every_action_type_of_decide_has_a_decision_test_naming_it():
    this_file = Path(__file__).read_text()
    tests = [node for node in ast.parse(this_file).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    named = "\n".join(ast.get_source_segment(this_file, node) for node in tests)
    assert all(name in vars(decide) for name in NOT_ACTIONS)  # else a stale exclusion
    assert len(ACTION_TYPES) >= 20
    assert [name for name in ACTION_TYPES if f"decide.{name}(" not in named] == []
