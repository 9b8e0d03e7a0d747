"""Search grouped by URL (issue 41): a page archived by several crawls is one result listing
its captures, in the admin, the API (`results`, `items` kept as they were) and the CLI."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from crawls.models import ApiToken
from tests.search.waczs import real_crawler_page

pytestmark = pytest.mark.django_db

URL = "https://a.test/lighthouse"


def lighthouse(ts: str, words: str = "The keeper climbed the lighthouse.") -> dict:
    return real_crawler_page(URL, "The lighthouse keeper", words, ts=ts)


@pytest.fixture
def three(indexed):
    """URL captured by three crawls (the newest one the best match), and another page."""
    old = indexed([lighthouse("2026-10-01T10:00:00Z"),
                   real_crawler_page("https://a.test/harbour", "Harbour", "a lighthouse nearby",
                                     ts="2026-10-01T10:00:00Z")])
    middle = indexed([lighthouse("2026-11-01T10:00:00Z")])
    new = indexed([lighthouse("2026-12-01T10:00:00Z", "lighthouse lighthouse lighthouse keeper")])
    return old, middle, new


def test_the_admin_lists_a_url_once_with_each_capture_opening_its_replay(
        three, admin_settings, client, django_user_model):
    old, middle, new = three
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    page = client.get(reverse("admin:archiver_search"), {"q": "lighthouse"}).content.decode()
    rows = re.findall(r"<tr><td>.*?</tr>", page, re.S)
    assert len(rows) == 2  # the lighthouse page once, the harbour page
    row = next(r for r in rows if URL in r)
    for crawl, stamp in ((new, "20261201100000"), (middle, "20261101100000"), (old, "20261001100000")):
        replay = reverse("admin:crawls_crawl_replay", args=[crawl.pk])
        assert f"{replay}?url=https%3A%2F%2Fa.test%2Flighthouse&amp;ts={stamp}" in row
        assert reverse("admin:crawls_crawl_change", args=[crawl.pk]) in row
    assert row.index("2026-12-01") < row.index("2026-11-01") < row.index("2026-10-01")  # newest first


def test_the_api_groups_items_by_url_in_results_and_keeps_items_per_capture(
        three, admin_settings, client, django_user_model):
    old, middle, new = three
    root = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(root, "reader", read_only=True)
    body = client.get("/api/v1/search", {"q": "lighthouse"}, HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    assert [i["url"] for i in body["items"]].count(URL) == 3  # as before: one item per capture
    assert [r["url"] for r in body["results"]].count(URL) == 1
    result = next(r for r in body["results"] if r["url"] == URL)
    assert [c["crawl"] for c in result["captures"]] == [new.pk, middle.pk, old.pk]
    assert result["captures"][0]["captured_at"].startswith("2026-12-01T10:00:00")
    assert "<mark>" in result["snippet_html"] and result["title"] == "The lighthouse keeper"
    # A page of one result still lists every capture of its URL, ranked on later pages or not.
    first = client.get("/api/v1/search", {"q": "lighthouse", "limit": 1},
                       HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    assert len(first["items"]) == 1 and len(first["results"]) == 1
    assert len(first["results"][0]["captures"]) == (3 if first["results"][0]["url"] == URL else 1)


def test_the_search_command_prints_a_url_once_with_its_captures(three, capsys):
    old, middle, new = three
    call_command("search", "lighthouse")
    out = capsys.readouterr().out
    assert out.count(URL) == 1
    assert all(crawl.short_id in out for crawl in (old, middle, new))
    call_command("search", "lighthouse", "--json")
    assert [hit["url"] for hit in json.loads(capsys.readouterr().out)].count(URL) == 3
