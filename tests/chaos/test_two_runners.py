"""Two daemons on two data dirs sharing one PostgreSQL database and one Redis server; with a
bucket too in test_two_hosts_bucket.py (a file each, so the two long trials run on two workers)."""

from __future__ import annotations

import random

import pytest

from tests.chaos.trials import check_two_runners, two_runner_trial

# A hang guard far above the trial's time (1-2 min quiet, 5 on a busy machine).
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(900)]


# 16 crawls (bench/chaos.py runs 30): the kill still lands midway, with 3 to 8 of them
# final and the rest under way; 30 repeated that at twice the suite's cost.
def test_two_runners_and_a_kill_9_of_one_lose_and_repeat_nothing(chaos_root, postgres_url):
    result = two_runner_trial(chaos_root, postgres_url, crawls=16, pages=4, timeout=50,
                              rng=random.Random(9), webhook_wait=10)
    check_two_runners(result, crawls=16)

