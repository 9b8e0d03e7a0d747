"""test_engine_restart.py's trial on an engine with live-restore: its containers outlive it."""

from __future__ import annotations

import pytest

from tests.chaos.engine_trial import check_restart_trial, engine_restart_trial, private_dockerd

pytestmark = pytest.mark.slow


def test_an_engine_restart_with_live_restore_loses_and_repeats_nothing(chaos_root):
    with private_dockerd(live_restore=True) as engine:
        result = engine_restart_trial(chaos_root, engine, crawls=2)
    check_restart_trial(result)
