"""Search over archived page text: sources, ranking, snippets, the query language, orgs,
reindexing and resumable indexing. tests/search/test_search_postgres.py runs it again on
PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import threading

import pytest
from archiver_crawler.cli import run_instance
from archiver_crawler.config import parse_args
from django.core.management import call_command
from django.urls import reverse

from crawls import search
from crawls.models import INDEX_RETRY, ApiToken, CrawlFile, PageText
from crawls.models.search import INDEX_LEASE
from runner import indexing
from tests.crawler.running import base_args
from tests.search.conftest import NOW
from tests.search.waczs import keep, keep_pages, real_crawler_page
from tests.sitegen import serve_site

pytestmark = pytest.mark.django_db

LOREM = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 20
PAGES = [
    real_crawler_page("https://a.test/lighthouse", "The lighthouse keeper",
                      f"{LOREM} The keeper climbed the lighthouse every night. {LOREM}"),
    real_crawler_page("https://a.test/harbour", "Harbour news",
                      f"{LOREM} A lighthouse was mentioned once near the harbour wall. {LOREM}"),
    real_crawler_page("https://a.test/bakery", "Bakery",
                      "Fresh bread <script>alert(1)</script> & cakes; lighthouses on the menu."),
]


def urls(hits) -> list[str]:
    return [hit.url for hit in hits]


def test_pages_of_a_real_crawler_wacz_are_found_with_title_and_capture_time(indexed):
    crawl = indexed(PAGES)
    (hit,) = search.search("keeper climbed")
    assert (hit.url, hit.title, hit.crawl_id) == ("https://a.test/lighthouse",
                                                  "The lighthouse keeper", crawl.pk)
    assert hit.captured_at == dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)
    assert hit.filename.endswith(".wacz")


def test_a_page_crawled_by_archivers_crawler_in_http_mode_is_found(conf_data_dir, tmp_path,
                                                                    redis_url, make_crawl):
    crawl = make_crawl()
    with serve_site() as site:
        config = parse_args(base_args(site.url, redis_url, tmp_path, "--generateWACZ",
                                      "--text", "to-pages"),
                            env={"CRAWLER_HOSTNAME": "crawl-crawl1-0"})
        assert int(asyncio.run(run_instance(config))) == 0
    wacz = next((tmp_path / "collections" / "coll").glob("*.wacz"))
    keep(conf_data_dir, crawl, wacz)
    assert indexing.index_next(conf_data_dir, NOW)
    hits = search.search("A1", crawl=crawl.pk)
    assert urls(hits)[0] == site.root + "/site/a1.html"  # its title, and its h1
    assert len(search.search("lorem ipsum", crawl=crawl.pk, limit=100)) >= 8


def test_a_title_match_ranks_above_a_passing_mention_and_the_snippet_marks_it(indexed):
    indexed(PAGES)
    hits = search.search("lighthouse")
    assert urls(hits) == ["https://a.test/lighthouse", "https://a.test/harbour"]
    assert hits[0].rank > hits[1].rank > 0
    assert f"{search.MARK_START}lighthouse{search.MARK_END}" in hits[0].snippet.lower()
    assert "<mark>lighthouse</mark>" in hits[1].snippet_html().lower()


def test_the_html_snippet_escapes_everything_but_the_marks(indexed):
    indexed(PAGES)
    (hit,) = search.search("bread")
    shown = hit.snippet_html()
    # SQLite shows the page's "<script>" as text, escaped; PostgreSQL's headline drops tags.
    assert set(re.findall(r"<[^>]*>", shown)) == {"<mark>", "</mark>"}
    assert shown.count("<mark>") == 1 and "&amp;" in shown


@pytest.mark.parametrize(("query", "expected"), [
    ('"keeper climbed"', ["lighthouse"]),
    ('"climbed keeper"', []),
    ("lighthouse*", ["lighthouse", "harbour", "bakery"]),
    ("bread OR harbour", ["harbour", "bakery"]),
    ("lighthouse AND harbour", ["harbour"]),
    ("lighthouse -harbour", ["lighthouse"]),
    ("lighthouse NOT harbour", ["lighthouse"]),
    ("(bread OR keeper) lorem", ["lighthouse"]),
    ("LIGHTHOUSE Keeper", ["lighthouse"]),
    ("e-mail", []),
    ("keeper OR (lighthouse NOT keeper)", ["lighthouse", "harbour"]),
    ("lorem (lighthouse NOT keeper)", ["harbour"]),
    ("lighthouse NOT (keeper lorem)", ["harbour"]),
])
def test_phrases_prefixes_and_boolean_queries(indexed, query, expected):
    indexed(PAGES)
    found = sorted(url.rsplit("/", 1)[-1] for url in urls(search.search(query)))
    assert found == sorted(expected)


@pytest.mark.parametrize(("query", "message"), [
    ('"unclosed', "quote"),
    ("(lighthouse", "bracket"),
    ("lighthouse)", "bracket"),
    ("", "no word"),
    ("*** !!", "no word"),
    ("-lighthouse", "leave out"),
    ("NOT a NOT b", "leave out"),
    ("x" * 501, "longer"),
    ("lighthouse OR NOT keeper", "each side of OR"),
    ("lighthouse OR -keeper", "each side of OR"),
    ("NOT keeper OR lighthouse", "each side of OR"),
    ("lighthouse NOT (harbour OR NOT bread)", "each side of OR"),
    ("lighthouse NOT (NOT bread)", "leave out"),
])
def test_a_query_that_cannot_be_read_is_a_clear_error(indexed, query, message):
    indexed(PAGES)
    with pytest.raises(search.QueryError, match=message):
        search.search(query)


@pytest.mark.parametrize(("query", "message"), [
    (" OR ".join(f"{letter}*" for letter in "abcdefghijklmnopqrstuvwxyz"), "more than 16 words"),
    ("a* OR b* OR c*", "3 characters"),
    ("lighthouse a*", "3 characters"),
    ('"the keeper l"*', "3 characters"),
    ("ligh* keep* harb* brea* lore*", "more than 4 prefixes"),
    (" ".join(f"word{i}" for i in range(17)), "more than 16 words"),
    ('"one two three four five six seven eight nine" "ten eleven twelve thirteen fourteen '
     'fifteen sixteen seventeen"', "more than 16 words"),
])
def test_a_query_past_the_limits_is_refused_before_any_search(indexed, query, message,
                                                             django_assert_num_queries):
    indexed(PAGES)
    with django_assert_num_queries(0), pytest.raises(search.QueryTooComplex, match=message):
        search.search(query)


def test_a_query_at_the_limits_is_searched(indexed):
    indexed(PAGES)
    assert len(search.search("lig* kee* lor* cli* " + " ".join(["lighthouse"] * 12))) == 1


@pytest.mark.parametrize("query", ['NEAR(a b)', "a:b", "^lighthouse", "col:*", "a + b", "''",
                                   'lighthouse"*', "AND OR NOT", "lighthouse OR", "{x}"])
def test_fts5_syntax_in_a_query_is_only_words(indexed, query):
    indexed(PAGES)
    try:
        search.search(query)
    except search.QueryError as exc:
        assert str(exc)  # refused with a reason, never a database error


def test_filters_by_org_crawl_and_capture_time(indexed):
    mine = indexed(PAGES, org="alpha")
    theirs = indexed([real_crawler_page("https://b.test/", "Lighthouse B", "lighthouse",
                                        ts="2026-11-01T00:00:00Z")], org="beta")
    assert {h.crawl_id for h in search.search("lighthouse", org=mine.org_id)} == {mine.pk}
    assert urls(search.search("lighthouse", crawl=theirs.pk)) == ["https://b.test/"]
    since = dt.datetime(2026, 11, 15, tzinfo=dt.UTC)
    assert "https://b.test/" not in urls(search.search("lighthouse", since=since))


def test_results_are_paged(indexed):
    indexed([real_crawler_page(f"https://a.test/{i}", f"Page {i}", "common words") for i in range(7)])
    first, second = search.search("common", limit=5), search.search("common", limit=5, offset=5)
    assert len(first) == 5 and len(second) == 2 and not set(urls(first)) & set(urls(second))


def test_past_the_ranked_matches_every_match_is_still_listed_once(indexed, monkeypatch):
    # Both databases rank only the first RANKED matches their index lists (crawls/search.py,
    # the pages stored first); here 3 of 8, paged 2 at a time so one page holds both parts.
    monkeypatch.setattr(search, "RANKED", 3)
    indexed([real_crawler_page(f"https://a.test/{i}", f"Page {i}", "common words " * (i + 1))
             for i in range(8)])
    pages = [search.search("common", limit=2, offset=start) for start in (0, 2, 4, 6)]
    listed = [hit for hits in pages for hit in hits]
    assert sorted(urls(listed)) == sorted(f"https://a.test/{i}" for i in range(8))
    # Within the ranked three, the page saying it most often is first; the rest follow in
    # the order they were stored, unranked.
    assert urls(listed) == [f"https://a.test/{i}" for i in (2, 1, 0, 3, 4, 5, 6, 7)]
    ranks = [hit.rank for hit in listed]
    assert ranks[0] > ranks[1] > ranks[2] > 0 and ranks[3:] == [0] * 5


def test_a_query_matching_fewer_than_the_ranked_is_ranked_in_full(indexed, monkeypatch):
    monkeypatch.setattr(search, "RANKED", 3)
    indexed([real_crawler_page(f"https://a.test/{i}", f"Page {i}", "rare words " * (i + 1))
             for i in range(3)])
    hits = search.search("rare", limit=2) + search.search("rare", limit=2, offset=2)
    assert urls(hits) == [f"https://a.test/{i}" for i in (2, 1, 0)] and hits[-1].rank > 0


def test_the_snippet_marks_a_match_deep_in_a_long_text(indexed):
    indexed([real_crawler_page("https://a.test/long", "Long", "filler " * 20_000 + "a needle here"),
             real_crawler_page("https://a.test/titled", "Needle in the title", "no match here")])
    hits = {hit.url: hit for hit in search.search("needle")}
    assert f"{search.MARK_START}needle{search.MARK_END}" in hits["https://a.test/long"].snippet
    assert "no match here" in hits["https://a.test/titled"].snippet_text()


def test_a_page_text_holding_nul_characters_is_indexed_without_them(indexed):
    indexed([real_crawler_page("https://a.test/nul", "Zero\x00byte", "nul\x00led text")])
    (hit,) = search.search("nulled")
    assert hit.title == "Zerobyte"


def test_an_org_token_never_sees_another_orgs_pages(indexed, client, django_user_model,
                                                      admin_settings):
    alpha = indexed(PAGES, org="alpha")
    indexed([real_crawler_page("https://b.test/secret", "Lighthouse plans", "lighthouse")],
            org="beta")
    root = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(root, "alpha's", org=alpha.org, read_only=True)
    answer = client.get("/api/v1/search", {"q": "lighthouse", "limit": 1},
                        HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [i["org"] for i in body["items"]] == ["alpha"] and body["next_cursor"]
    more = client.get("/api/v1/search", {"q": "lighthouse", "cursor": body["next_cursor"]},
                      HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    assert {i["org"] for i in more["items"]} == {"alpha"}
    assert "https://b.test/secret" not in [i["url"] for i in body["items"] + more["items"]]
    bad = client.get("/api/v1/search", {"q": '"open'}, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert bad.status_code == 422 and "quote" in bad.json()["message"]


@pytest.mark.parametrize("query", ["lighthouse OR NOT keeper", "lighthouse OR -keeper"])
def test_or_not_is_a_clear_refusal_in_the_api_and_the_admin(indexed, client, django_user_model,
                                                            admin_settings, query):
    indexed(PAGES)
    root = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(root, "reader", read_only=True)
    answer = client.get("/api/v1/search", {"q": query}, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 422, answer.content
    assert "each side of OR" in answer.json()["message"]
    client.force_login(root)
    page = client.get(reverse("admin:archiver_search"), {"q": query})
    assert page.status_code == 400 and "each side of OR" in page.content.decode()


def test_a_query_past_the_limits_is_a_400_saying_why(indexed, client, django_user_model,
                                                     admin_settings):
    indexed(PAGES)
    root = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(root, "reader", read_only=True)
    answer = client.get("/api/v1/search", {"q": "a* OR b* OR c*"},
                        HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "query_too_complex"
    assert "3 characters" in answer.json()["message"]


def test_reindex_indexes_the_archives_kept_before_again(indexed, conf_data_dir):
    crawl = indexed(PAGES)
    PageText.objects.all().delete()
    assert search.search("lighthouse") == []
    call_command("reindex", crawl.pk[:8])
    assert len(search.search("lighthouse")) == 2
    assert PageText.objects.count() == 3  # not twice: a file's rows are replaced


def test_an_indexing_pass_interrupted_is_taken_again_once_its_lease_ran_out(
        conf_data_dir, tmp_path, make_crawl):
    crawl = make_crawl()
    file = keep_pages(conf_data_dir, crawl, PAGES, tmp_path / "made")
    # A runner won the file, then died before it finished.
    assert CrawlFile.objects.claim_index(file.pk, None, NOW)
    assert not indexing.index_next(conf_data_dir, NOW + INDEX_LEASE / 2)
    assert indexing.index_next(conf_data_dir, NOW + INDEX_LEASE)
    assert len(search.search("lighthouse")) == 2


def test_a_stop_during_a_pass_writes_nothing_and_leaves_the_file_due(conf_data_dir, tmp_path,
                                                                     make_crawl):
    crawl = make_crawl()
    file = keep_pages(conf_data_dir, crawl, PAGES, tmp_path / "made")
    stop = threading.Event()
    stop.set()
    assert indexing.index_next(conf_data_dir, NOW, stop)
    file.refresh_from_db()
    assert file.indexed_at is None and not PageText.objects.exists()
    assert indexing.index_next(conf_data_dir, NOW)  # due again at once
    assert PageText.objects.count() == 3


def test_an_unreadable_archive_is_tried_again_later_with_the_reason(conf_data_dir, tmp_path,
                                                                    make_crawl):
    crawl = make_crawl()
    junk = tmp_path / "junk.wacz"
    junk.write_bytes(b"not a zip")
    file = keep(conf_data_dir, crawl, junk)
    assert indexing.index_next(conf_data_dir, NOW)
    file.refresh_from_db()
    assert file.indexed_at is None and "zip" in file.index_error
    assert file.index_retry_at == NOW + INDEX_RETRY


def test_the_search_command_prints_a_table_and_json(indexed, capsys):
    crawl = indexed(PAGES)
    call_command("search", "lighthouse", "--json", "--limit", "1")
    (hit,) = json.loads(capsys.readouterr().out)
    assert hit["url"] == "https://a.test/lighthouse" and hit["crawl"] == crawl.pk
    call_command("search", "keeper", "--crawl", crawl.pk[:6])
    out = capsys.readouterr().out
    assert "The lighthouse keeper" in out and "https://a.test/lighthouse" in out


def test_the_admin_search_page_shows_escaped_snippets_and_opens_the_replay_at_the_page(
        indexed, admin_settings, client, django_user_model):
    crawl = indexed(PAGES)
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    answer = client.get(reverse("admin:archiver_search"), {"q": "bread"})
    assert answer.status_code == 200
    page = answer.content.decode()
    assert "Fresh <mark>bread</mark>" in page and "<script>alert" not in page
    replay = reverse("admin:crawls_crawl_replay", args=[crawl.pk])
    assert f'{replay}?url=https%3A%2F%2Fa.test%2Fbakery' in page
    bad = client.get("/admin/search/", {"q": '"open'}).content.decode()
    assert "quote" in bad
