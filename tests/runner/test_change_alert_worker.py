"""Change alerts off the daemon's tick (issue 36): a comparison of two crawls' texts froze the
tick for minutes (no heartbeat, another org's crawl not started); the daemon now runs them in
a thread of their own, and only `run --once` / `--drain` in a step of the tick."""

from __future__ import annotations

import pytest

from crawls import alerts
from runner.steps import periodic
from tests.runner.step_helpers import T0
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_daemon_tick_never_compares_crawls_and_its_worker_does(make_runner, fake, monkeypatch):
    calls = []
    monkeypatch.setattr(alerts, "check_changes",
                        lambda owner, now, settings=None: calls.append(owner) or False)
    runner = make_runner(fake)
    assert "change alerts" not in [name for name, _ in runner.steps]
    runner.tick(T0)
    assert calls == []

    worker = periodic.ChangeAlertWorker(runner.settings, runner.id, runner.clock).start()
    try:
        wait_for(lambda: calls, timeout=30)
    finally:
        worker.stop(timeout=10)
    assert calls[0] == runner.id

    # `run --once` / `--drain` have no thread: there, a tick's step compares.
    calls.clear()
    assert periodic.attach_change_alerts(runner.rt, "once", runner.steps) is None
    runner.tick(T0)
    assert calls == [runner.id]
