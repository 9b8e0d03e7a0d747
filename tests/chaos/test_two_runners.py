"""Two daemons on two data dirs sharing one PostgreSQL database and one Redis server."""

from __future__ import annotations

import random

import pytest

from tests.chaos.trials import two_runner_trial

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_two_runners_and_a_kill_9_of_one_lose_and_repeat_nothing(chaos_root, postgres_url):
    result = two_runner_trial(chaos_root, postgres_url, crawls=30, pages=4, timeout=50,
                              rng=random.Random(9), webhook_wait=10)
    counts = {key: result[key] for key in ("incomplete", "crawled_twice", "pages_twice",
                                           "archives_unrecorded", "pages_missing",
                                           "files_missing", "wacz_invalid")}
    assert counts == dict.fromkeys(counts, 0), result
    assert result["crawls"] == 30


def test_two_hosts_sharing_a_bucket_and_a_kill_9_of_one_lose_and_repeat_nothing(chaos_root,
                                                                               postgres_url):
    """The two-host set-up: every archive goes to one S3 bucket (moto's server), uploaded by
    the crawlers and recorded by whichever runner holds the crawl."""
    result = two_runner_trial(chaos_root, postgres_url, crawls=30, pages=4, timeout=60,
                              rng=random.Random(14), webhook_wait=10, bucket=True)
    counts = {key: result[key] for key in ("incomplete", "crawled_twice", "pages_twice",
                                           "archives_unrecorded", "pages_missing",
                                           "files_missing", "wacz_invalid")}
    assert counts == dict.fromkeys(counts, 0), result
    assert result["crawls"] == 30
