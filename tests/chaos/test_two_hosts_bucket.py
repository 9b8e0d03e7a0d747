"""test_two_runners.py's trial on two hosts that share a bucket."""

from __future__ import annotations

import random

import pytest

from tests.chaos.trials import check_two_runners, two_runner_trial

# A hang guard far above the trial's time (1-2 min quiet, 5 on a busy machine).
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(900)]


# 16 crawls (bench/chaos.py runs 30): the kill still lands midway, with 3 to 8 of them
# final and the rest under way; 30 repeated that at twice the suite's cost.
def test_two_hosts_sharing_a_bucket_and_a_kill_9_of_one_lose_and_repeat_nothing(chaos_root,
                                                                               postgres_url):
    """The two-host set-up: every archive goes to one S3 bucket (moto's server), uploaded by
    the crawlers and recorded by whichever runner holds the crawl."""
    result = two_runner_trial(chaos_root, postgres_url, crawls=16, pages=4, timeout=60,
                              rng=random.Random(14), webhook_wait=10, bucket=True)
    check_two_runners(result, crawls=16)
