"""The --qa queue (runner/qa_queue.py) without a browser (qa.review replaced): one review per
end of a crawl, claimed once, taken again after a lost lease with the old holder fenced off,
failures and skips recorded without touching the crawl, and the daemon's tick never runs one."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.models import Crawl, CrawlStatus, QualityReview, ReviewStatus
from crawls.models.crawl_runner import REVIEW_GRACE
from runner import qa, qa_queue
from tests.runner.step_helpers import T0

pytestmark = pytest.mark.django_db
R = ReviewStatus


@pytest.fixture
def store(memory_store):
    return memory_store


@pytest.fixture
def reviews(monkeypatch):
    calls = []

    def review(crawl, settings, **options):
        calls.append(crawl.pk)
        outcome = getattr(review, "outcome", None)
        if outcome is not None:
            raise outcome
        return 3

    monkeypatch.setattr(qa, "review", review)
    return review, calls


def ended(make_crawl, status=CrawlStatus.COMPLETE, **config) -> Crawl:
    crawl = make_crawl(**config)
    (claim,) = Crawl.objects.filter(pk=crawl.pk).claim("runner-a", T0, 30)
    assert crawl.finish(status, claim.token, T0)
    return crawl


def test_each_end_of_a_qa_crawl_queues_one_review_due_once_its_files_are_kept(make_crawl):
    crawl = ended(make_crawl, qa=True)
    assert ended(make_crawl).config.get("qa") is None  # not asked for: no row, nothing stored
    assert not QualityReview.objects.exclude(crawl=crawl).exists()
    ended(make_crawl, CrawlStatus.CANCELED, qa=True)
    assert QualityReview.objects.count() == 1  # a canceled crawl kept nothing to review
    review = QualityReview.objects.get(crawl=crawl)
    assert (review.status, review.retry_at) == (R.QUEUED, T0 + dt.timedelta(seconds=REVIEW_GRACE))
    assert not QualityReview.objects.due(T0).exists()
    assert qa_queue.make_due(crawl, T0)
    assert QualityReview.objects.due(T0).count() == 1


def test_a_due_review_is_claimed_and_run_exactly_once(make_crawl, settings, reviews):
    review, calls = reviews
    crawl = ended(make_crawl, qa=True)
    qa_queue.make_due(crawl, T0)
    clock = lambda: T0  # noqa: E731
    assert qa_queue.review_next(settings, "runner-a/qa", T0, clock=clock)
    assert not qa_queue.review_next(settings, "runner-b/qa", T0, clock=clock)
    assert not qa_queue.review_next(settings, "runner-b/qa", T0 + dt.timedelta(days=1), clock=clock)
    assert calls == [crawl.pk]
    row = QualityReview.objects.get(crawl=crawl)
    assert (row.status, row.pages, row.attempts, row.retry_at, row.error) == (R.DONE, 3, 1, None, "")


def test_a_review_whose_runner_died_is_taken_again_and_the_old_holder_fenced(make_crawl, settings, reviews):
    review, calls = reviews
    crawl = ended(make_crawl, qa=True)
    qa_queue.make_due(crawl, T0)
    (dead,) = QualityReview.objects.claim("dead/qa", T0, settings.lease_seconds)
    assert not qa_queue.review_next(settings, "runner-b/qa", T0 + dt.timedelta(seconds=1))
    expired = T0 + dt.timedelta(seconds=settings.lease_seconds)
    assert qa_queue.review_next(settings, "runner-b/qa", expired, clock=lambda: expired)
    assert calls == [crawl.pk]
    row = QualityReview.objects.get(crawl=crawl)
    # The dead holder's late outcome, with its old token, changes nothing.
    qa_queue.record(row, dead.token, R.FAILED, "late", expired, qa_queue.Renewal(row.pk, dead.token, 5, None))
    row.refresh_from_db()
    assert (row.status, row.error, row.lease_token) == (R.DONE, "", dead.token + 1)


@pytest.mark.parametrize(("outcome", "status", "words"), [
    (RuntimeError("chromium crashed"), R.FAILED, "RuntimeError: chromium crashed"),
    (qa.NoBrowser("no Chromium to replay in"), R.SKIPPED, "no Chromium to replay in"),
])
def test_a_review_that_fails_or_cannot_run_is_recorded_and_the_crawl_stays_as_it_ended(
        make_crawl, settings, reviews, outcome, status, words):
    review, calls = reviews
    review.outcome = outcome
    crawl = ended(make_crawl, qa=True)
    qa_queue.make_due(crawl, T0)
    assert qa_queue.review_next(settings, "runner-a/qa", T0, clock=lambda: T0)
    row = QualityReview.objects.get(crawl=crawl)
    assert (row.status, row.error, row.retry_at) == (status, words, None)
    assert Crawl.objects.get(pk=crawl.pk).status == CrawlStatus.COMPLETE
    # `archiver qa ID` takes it again (its own lease), and it succeeds this time.
    review.outcome = None
    row, token = qa_queue.take(crawl, "cli-1", T0, settings.lease_seconds)
    row = qa_queue.run_claimed(settings, row.pk, token, T0, clock=lambda: T0, mark=False)
    assert (row.status, row.attempts, row.error) == (R.DONE, 2, "")


def test_archiver_qa_does_not_take_a_review_a_runner_holds(make_crawl, settings):
    crawl = ended(make_crawl, qa=True)
    qa_queue.make_due(crawl, T0)
    QualityReview.objects.claim("runner-a/qa", T0, settings.lease_seconds)
    QualityReview.objects.filter(crawl=crawl).update(status=R.RUNNING)
    assert qa_queue.take(crawl, "cli-1", T0, settings.lease_seconds) is None


def test_the_daemon_tick_never_runs_a_review(make_runner, fake, make_crawl, reviews):
    review, calls = reviews
    crawl = ended(make_crawl, qa=True)
    qa_queue.make_due(crawl, T0)
    runner = make_runner(fake)
    assert "quality review" not in [name for name, _ in runner.steps]
    runner.tick(T0)
    runner.tick(T0 + dt.timedelta(seconds=REVIEW_GRACE * 2))
    assert calls == [] and QualityReview.objects.get(crawl=crawl).status == R.QUEUED
    # `run --once` / `--drain` have no thread: there, a tick's step runs it.
    runner.start_reviews("once")
    runner.tick(T0 + dt.timedelta(seconds=REVIEW_GRACE * 3))
    assert calls == [crawl.pk]


def test_a_list_of_crawls_reads_all_their_reviews_in_two_queries(make_crawl, django_assert_num_queries):
    """The API's crawl list shows each crawl's review; two queries per row made a page of 100
    crawls 200 queries slower (issue 27's p99)."""
    from crawls.models import PageReview, review_state, review_states
    queued, scored, plain = ended(make_crawl, qa=True), ended(make_crawl), ended(make_crawl)
    for url, score in (("http://a/", 0.5), ("http://b/", 1.0)):
        PageReview.objects.create(crawl=scored, url=url, score=score, reviewed_at=T0)
    with django_assert_num_queries(2):
        states = review_states([queued.pk, scored.pk, plain.pk])
    assert set(states) == {queued.pk, scored.pk}
    assert states[queued.pk]["status"] == R.QUEUED and states[queued.pk]["pages"] == 0
    assert (states[scored.pk]["pages"], states[scored.pk]["worst"], states[scored.pk]["below_0_80"]) == (2, 0.5, 1)
    assert review_state(scored) == states[scored.pk] and review_state(plain) is None
