"""Two hosts on one PostgreSQL database, one Redis and one bucket; one runner killed -9 for
good, alone or with its crawlers: the other adopts its crawls, hands them over and finishes
them with no page lost and none archived twice."""

from __future__ import annotations

import random

import pytest

from tests.chaos.trials import adoption_trial

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
KEYS = ("incomplete", "pages_twice", "pages_missing", "archives_unrecorded", "files_missing",
        "wacz_invalid", "tracebacks")


# Slow pages for the daemon's death: the page in flight when the adopter takes over is what
# used to be archived twice (3 of 3 adopted crawls, before the handover). Without the
# handover the host's death loses 15 pages with the faster site.
@pytest.mark.parametrize("host_dies, pages, delay", [(False, 21, 1.5), (True, 8, 0.3)],
                         ids=["daemon-dies", "host-dies"])
def test_a_runner_gone_for_good_loses_and_repeats_no_page(chaos_root, postgres_url, host_dies,
                                                          pages, delay):
    result = adoption_trial(chaos_root, postgres_url, crawls=9, pages=pages, delay=delay,
                            host_dies=host_dies, rng=random.Random(21))
    counts = {key: result[key] for key in KEYS}
    assert counts == dict.fromkeys(KEYS, 0), result
    assert result["adopted"] >= 1, result  # the trial did what it is about
