"""GET /api/v1/crawls/<A>/diff/<B>: its refusals, each clear, and the token's org as its scope
(the diff itself is tested against real crawls in tests/runner/test_change_alerts.py)."""

from __future__ import annotations


def test_a_crawl_compared_with_itself_or_another_orgs_is_refused(api_db, client, make_crawl, make_org):
    make_org("other")
    a = make_crawl("complete")
    elsewhere = make_crawl("complete", org="other")
    same = client.get(f"/api/v1/crawls/{a.id}/diff/{a.id[:8]}")
    assert same.status_code == 422 and "itself" in same.text
    orgs = client.get(f"/api/v1/crawls/{a.id}/diff/{elsewhere.id}")
    assert orgs.status_code == 422 and "different orgs" in orgs.text


def test_crawls_not_kept_yet_are_a_conflict(api_db, client, make_crawl):
    running, done = make_crawl("running"), make_crawl("complete")
    answer = client.get(f"/api/v1/crawls/{running.id}/diff/{done.id}")
    assert answer.status_code == 409 and "not kept yet" in answer.text
    empty = client.get(f"/api/v1/crawls/{done.id}/diff/{make_crawl('complete').id}")
    assert empty.status_code == 409 and "no archive" in empty.text


def test_a_token_of_one_org_cannot_see_another_orgs_crawl(api_db, api_server, make_token, make_crawl,
                                                         make_org):
    make_org("other")
    mine, theirs = make_crawl("complete"), make_crawl("complete", org="other")
    with api_server.client(make_token(org="default")) as http:
        answer = http.get(f"/api/v1/crawls/{mine.id}/diff/{theirs.id}")
    assert answer.status_code == 404
