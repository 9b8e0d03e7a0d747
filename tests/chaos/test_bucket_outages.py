"""The bucket unreachable under a running daemon (moto's server behind a cuttable proxy):
waited out whether it goes while the crawler uploads or before the runner records the upload,
a bucket gone for good ends the crawl saying so, and SIGTERM stops the daemon meanwhile
(docs/runner.md, "The bucket away")."""

from __future__ import annotations

import pytest

from tests.chaos.bucket_trials import bucket_outage_trial, stop_without_bucket_trial
from tests.s3server import MotoMissing, moto_command

pytestmark = pytest.mark.slow

LOST_OR_TWICE = ("incomplete", "pages_twice", "pages_missing", "files_missing",
                 "archives_unrecorded", "wacz_invalid")


@pytest.fixture(autouse=True)
def moto():
    try:
        moto_command()
    except MotoMissing as exc:
        pytest.skip(str(exc))


def assert_nothing_lost_or_twice(result: dict) -> None:
    counts = {key: result[key] for key in LOST_OR_TWICE}
    assert counts == dict.fromkeys(counts, 0), (result["crawl"], result["details"], result["log_tail"])
    assert result["tracebacks"] == 0, result["log_tail"]


def test_a_bucket_cut_while_the_crawler_uploads_is_waited_out(chaos_root):
    result = bucket_outage_trial(chaos_root, moment="upload")
    assert_nothing_lost_or_twice(result)
    assert result["crawl"]["status"] == "complete", result["crawl"]
    assert result["upload_failures"] >= 2, result  # else the cut missed the upload
    assert (result["local_files"], result["objects"]) == (0, 1), result  # its archive in the bucket
    # Said when it started and when it ended (and the upload recorded), not per relaunch nor
    # per tick: about 100 ticks pass while it is cut.
    assert result["bucket_lines"] <= 10, result["log_tail"]


def test_a_bucket_cut_before_the_runner_records_the_upload_is_waited_out(chaos_root):
    result = bucket_outage_trial(chaos_root, moment="record")
    assert_nothing_lost_or_twice(result)
    assert result["crawl"]["status"] == "complete", result["crawl"]
    assert result["crawl"]["waiting_reason"] == "", result["crawl"]
    assert (result["local_files"], result["objects"]) == (0, 1), result
    assert result["bucket_lines"] <= 10, result["log_tail"]


def test_a_bucket_gone_for_good_fails_the_crawl_cause_first_keeping_its_pages(chaos_root):
    result = bucket_outage_trial(chaos_root, moment="upload", restore=False, grace=8)
    assert_nothing_lost_or_twice(result)  # its WARCs kept under the data dir: every page once
    crawl = result["crawl"]
    assert crawl["status"] == "failed", crawl
    assert crawl["error"].startswith("the bucket s3://"), crawl
    assert "was unreachable for" in crawl["error"], crawl
    assert "kept under the data dir" in crawl["error"], crawl
    assert result["local_files"] >= 1, result


def test_sigterm_while_a_crawl_waits_for_the_bucket_stops_the_daemon(chaos_root):
    # docs/runner.md promises 10 s; bench/chaos.py measures it, here a generous deadline.
    result = stop_without_bucket_trial(chaos_root, timeout=60)
    assert result["exit_code"] == 0, f"{result['stop_seconds']} s after SIGTERM\n{result['log'][-3000:]}"
    assert result["tracebacks"] == 0, result["log"][-3000:]
