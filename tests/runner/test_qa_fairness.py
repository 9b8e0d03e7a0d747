"""Quality reviews are fair across orgs (issue 36): one hostile page held the review worker
while another org's review waited. The daemon's QaWorker runs LANES reviews at once and
claims a review only for an org none of whose reviews runs, so an org whose reviews are
held (each page up to its deadline, tests/runner/test_qa_hostile.py) takes one lane at most
and another org's review is done meanwhile. qa.review is replaced: what is tested is who
gets a lane."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import OperationalError

from crawls.models import Crawl, Org, QualityReview, ReviewStatus
from runner import qa, qa_queue
from tests.runner.step_helpers import T0
from tests.runner.test_qa_queue import ended
from tests.waiting import HANG, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
R = ReviewStatus


def queued_review(make_crawl, org: Org, due: dt.datetime) -> Crawl:
    crawl = ended(make_crawl, org=org, qa=True)
    QualityReview.objects.filter(crawl=crawl).update(retry_at=due)
    return crawl


def test_a_review_is_not_claimed_for_an_org_whose_review_runs(make_crawl, org, settings):
    other = Org.objects.create(slug="other")
    first, second = queued_review(make_crawl, org, T0), queued_review(make_crawl, org, T0)
    theirs = queued_review(make_crawl, other, T0 + dt.timedelta(seconds=1))  # due last
    (claim,) = qa_queue.due_for_a_free_org(T0).claim("runner-a/qa", T0, settings.lease_seconds)
    assert claim.pk == QualityReview.objects.get(crawl=first).pk
    QualityReview.objects.filter(pk=claim.pk).update(status=R.RUNNING)

    later = T0 + dt.timedelta(seconds=2)
    (claim,) = qa_queue.due_for_a_free_org(later).claim("runner-a/qa", later, settings.lease_seconds)
    assert claim.pk == QualityReview.objects.get(crawl=theirs).pk  # not the org's second
    # Once the running review's lease has run out (its runner died), the org is free again.
    expired = T0 + dt.timedelta(seconds=settings.lease_seconds + 1)
    (claim,) = qa_queue.due_for_a_free_org(expired).claim("runner-b/qa", expired, settings.lease_seconds)
    assert claim.pk in {QualityReview.objects.get(crawl=c).pk for c in (first, second)}


def test_an_org_whose_reviews_are_held_takes_one_lane_and_another_orgs_review_is_done(
        make_crawl, org, settings, monkeypatch):
    other = Org.objects.create(slug="other")
    now = dt.datetime.now(dt.UTC)
    held = [queued_review(make_crawl, org, now - dt.timedelta(minutes=2)) for _ in range(2)]
    theirs = queued_review(make_crawl, other, now + dt.timedelta(days=1))  # made due below
    release, reviewed = threading.Event(), []

    def review(crawl, settings, **options):
        if crawl.org_id == org.pk:  # a review of hostile pages, each held to its deadline
            release.wait(HANG)
        reviewed.append(crawl.pk)
        return 1

    monkeypatch.setattr(qa, "review", review)
    status = lambda crawl: retried(lambda: QualityReview.objects.get(crawl=crawl).status)  # noqa: E731
    worker = qa_queue.QaWorker(settings, "runner-a/qa", poll_interval=0.05).start()
    try:
        wait_for(lambda: R.RUNNING in {status(c) for c in held}, what="one of the held org's reviews running")
        # Due after both of the held org's: a lane free to claim takes the org's second first,
        # unless it may not.
        retried(lambda: QualityReview.objects.filter(crawl=theirs).update(retry_at=now - dt.timedelta(minutes=1)))
        wait_for(lambda: status(theirs) == R.DONE, what="the other org's review")
        assert sorted(status(c) for c in held) == [R.QUEUED, R.RUNNING]  # one lane, not both
        assert reviewed == [theirs.pk]
        release.set()
        wait_for(lambda: all(status(c) == R.DONE for c in held), what="the held org's reviews")
    finally:
        release.set()
        worker.stop(timeout=HANG)


def retried(read):
    """`read()`, again while the in-memory test database's tables are locked by the lanes'
    writes (a shared-cache SQLite does not wait for a lock; the lanes wait their own out)."""
    def attempt():
        try:
            return (read(),)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            return None
    return wait_for(attempt, what="a database read")[0]
