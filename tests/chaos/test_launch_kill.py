"""kill -9 of the daemon in the middle of a local launch (spawned, not yet recorded)."""

from __future__ import annotations

import pytest

from tests.chaos.harness import CrawlerWatch, LaunchSniper, Trial, chaos_site

pytestmark = pytest.mark.slow


def test_a_kill_9_during_a_local_launch_never_leaves_two_crawlers_for_one_instance(chaos_root):
    with chaos_site(trees=3, pages=12, delay=0.15) as site, \
            Trial(chaos_root, webhooks=False, env={"ARCHIVER_MAX_CONCURRENT_CRAWLS": "3"}) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        ids, caught, in_window = [], [], []
        with CrawlerWatch(data_dir.path) as watch:
            for k in range(3):
                trial.start_daemon(data_dir)
                trial.daemon_ready(data_dir)
                with LaunchSniper(trial, data_dir) as sniper:
                    ids.append(trial.add(data_dir, site.tree_url(k)))
                caught.append(sniper.caught)
                in_window.append(sniper.in_window)
            trial.start_daemon(data_dir)
            statuses = trial.wait_final(ids, timeout=30)
        result = trial.audit(site, ids)
    assert all(caught), f"a launch was not caught: {caught}"
    assert watch.doubled() == {}, ("two crawler processes for one instance: "
                                   f"{watch.doubled()} (killed before the record: {in_window})")
    assert result["pages_fetched_twice"] == 0, result["details"]
    assert result["pages_twice"] == 0, result["details"]
    assert result["incomplete"] == 0, statuses
