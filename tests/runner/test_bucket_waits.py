"""How the runner counts a bucket outage from an instance's exits (runner/bucket.py); the
outage itself, against a real server, is tests/chaos/test_bucket_outages.py."""

from __future__ import annotations

import datetime as dt

from crawls.models import ExitReason
from runner import bucket, decide

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_an_upload_failure_is_no_failed_attempt_of_the_crawler():
    assert ExitReason.STORAGE not in decide.FAILED_ATTEMPT
    history = [(ExitReason.STORAGE, "exited", at(s)) for s in range(10)]
    assert decide.failures_of(history) == 0


def test_the_outage_starts_at_the_first_of_the_upload_failures_in_a_row():
    history = [(ExitReason.STORAGE, "exited", at(0)), (ExitReason.CRASH, "exited", at(5)),
               (ExitReason.STORAGE, "exited", at(10)), (ExitReason.STORAGE, "exited", at(13))]
    assert bucket.upload_failures(history) == (2, at(10))


def test_an_instance_that_uploaded_since_has_no_outage():
    history = [(ExitReason.STORAGE, "exited", at(0)), (ExitReason.DONE, "exited", at(5))]
    assert bucket.upload_failures(history) == (0, None)
    assert bucket.upload_failures([]) == (0, None)
