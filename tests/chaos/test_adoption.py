"""Two hosts on one PostgreSQL database, one Redis and one bucket; one runner killed -9 for
good, alone or with its crawlers: the other adopts its crawls, hands them over and finishes
them with no page lost and none archived twice."""

from __future__ import annotations

import random

import pytest

from tests.chaos.trials import adoption_trial, check_adoption

# A hang guard far above the trial's time (1-2 min quiet, 5 on a busy machine).
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(900)]


# Slow pages: the page in flight when the adopter takes over is what used to be archived twice
# (3 of 3 adopted crawls, before the handover). The host's death, with its crawlers, is
# test_adoption_host_dies.py (a file each, so the two long trials run on two workers).
def test_a_runner_gone_for_good_loses_and_repeats_no_page(chaos_root, postgres_url):
    check_adoption(adoption_trial(chaos_root, postgres_url, crawls=9, pages=21, delay=1.5,
                                  host_dies=False, rng=random.Random(21)))
