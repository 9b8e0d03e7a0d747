"""test_adoption.py's trial with the runner's whole host gone: its crawlers die with it."""

from __future__ import annotations

import random

import pytest

from tests.chaos.trials import adoption_trial, check_adoption

# A hang guard far above the trial's time (1-2 min quiet, 5 on a busy machine).
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(900)]


# Without the handover the host's death loses 15 pages with this faster site.
def test_a_runner_host_gone_for_good_loses_and_repeats_no_page(chaos_root, postgres_url):
    check_adoption(adoption_trial(chaos_root, postgres_url, crawls=9, pages=8, delay=0.3,
                                  host_dies=True, rng=random.Random(21)))
