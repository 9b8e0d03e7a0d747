"""crawls.actions on its own: one error type whose kind the API maps, one nudge per bulk
action, and the rules every interface now shares (the CLI, the admin and the API are
tested through their own tests)."""

from __future__ import annotations

import pytest

from archiver.errors import ActionRefused
from crawls import actions
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Org
from crawls.rules import MAX_REGEXES

S = CrawlStatus
pytestmark = pytest.mark.django_db


@pytest.fixture
def nudges(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    monkeypatch.setattr("crawls.wake.nudge", lambda: calls.append(True) or False)
    return calls


def crawl_in(status: str, **fields) -> Crawl:
    crawl = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=["https://example.com/"]))
    Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
    crawl.refresh_from_db()
    return crawl


def test_a_refused_transition_is_an_action_refused_of_kind_state_and_nudges_nobody(nudges):
    crawl = crawl_in(S.COMPLETE)
    with pytest.raises(ActionRefused) as refused:
        actions.resume(crawl)
    assert (refused.value.kind, str(refused.value)) == (
        ActionRefused.STATE, f"cannot resume crawl {crawl.short_id}: it is complete")
    assert nudges == []


def test_input_no_state_would_take_is_of_kind_invalid(nudges):
    crawl = crawl_in(S.RUNNING)
    with pytest.raises(ActionRefused) as scale:
        actions.scale(crawl, 9)
    with pytest.raises(ActionRefused) as regex:
        actions.add_exclusion(crawl, "(")
    assert scale.value.kind == regex.value.kind == ActionRefused.INVALID
    assert "is not a valid regular expression" in str(regex.value)


def test_an_exclusion_past_the_configs_limit_is_refused_for_every_interface(nudges):
    crawl = crawl_in(S.RUNNING, config={"seeds": ["https://example.com/"],
                                        "exclude": [f"x{n}" for n in range(MAX_REGEXES)]})
    with pytest.raises(ActionRefused, match=f"already has {MAX_REGEXES} exclusions"):
        actions.add_exclusion(crawl, "one-more")
    crawl.refresh_from_db()
    assert len(crawl.config["exclude"]) == MAX_REGEXES


def test_deleting_an_active_crawl_advises_people_and_answers_programs_with_the_bare_reason(nudges):
    crawl = crawl_in(S.PAUSED)
    with pytest.raises(ActionRefused) as refused:
        actions.delete(crawl)
    assert refused.value.message == f"cannot delete crawl {crawl.short_id}: it is paused"
    assert str(refused.value) == f"{refused.value.message} (stop or cancel it first)"
    assert Crawl.objects.filter(pk=crawl.pk).exists()


def test_actions_inside_one_nudge_wake_the_runner_once_when_the_block_ends(nudges):
    crawls = [crawl_in(S.QUEUED) for _ in range(3)]
    with actions.one_nudge():
        for crawl in crawls:
            actions.pause(crawl)
        with actions.one_nudge():  # an inner block hands its nudge to the outer one
            actions.resume(crawls[0])
        assert nudges == []
    assert nudges == [True]
    with actions.one_nudge(), pytest.raises(ActionRefused):
        actions.retry(crawls[1])  # paused: refused, so nothing to wake the runner for
    assert nudges == [True]
