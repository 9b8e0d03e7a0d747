"""The Docker engine restarted under running crawler containers, on a dockerd of the test's own
(never the suite's shared engine): tests/chaos/engine_trial.py, docs/runner.md "Docker
engine outages". Here the engine stops with its containers; test_engine_restart_live.py
restarts one with live-restore (a file each, so the two long trials run on two workers)."""

from __future__ import annotations

import pytest

from tests.chaos.engine_trial import check_restart_trial, engine_restart_trial, private_dockerd

pytestmark = pytest.mark.slow


def test_an_engine_restart_mid_crawl_loses_and_repeats_nothing(chaos_root):
    with private_dockerd(live_restore=False) as engine:
        result = engine_restart_trial(chaos_root, engine, crawls=2)  # bench/chaos.py runs 3
    check_restart_trial(result)
