"""What one search may cost (issue 36): over 30,000 pages, `a* OR b* OR ... z*` took 40 s and
held a gunicorn thread; eight at once held them all. A query past the limits is refused before
the database is asked; any other is cut by its work budget (SQLite: VM steps, counted here,
never timed; PostgreSQL: statement_timeout). tests/search/test_search_postgres.py runs this
file again on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import random
import string

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from crawls import search
from crawls.api.routes_search import SEARCH_COST
from crawls.config import CrawlConfig
from crawls.models import ApiToken, Crawl, CrawlFile, Org, PageText

pytestmark = pytest.mark.django_db

PAGES = 30_000
ATTACK = " OR ".join(f"{letter}*" for letter in string.ascii_lowercase)


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))))
    return sorted(words)


def add_pages(org: str, count: int, words: list[str], rng: random.Random) -> Org:
    owner, _ = Org.objects.get_or_create(slug=org)
    crawl = Crawl.create(owner, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    file = CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.pk}/a.wacz", size=1,
                                    sha256="0" * 64)
    # Every page holds "common"; the rest is drawn with a Zipf-like spread, as words go.
    weights = [1 / rank for rank in range(1, len(words) + 1)]
    rows = [(crawl.pk, file.pk, f"https://{org}.test/{i}", f"page {i}",
             "common " + " ".join(rng.choices(words, weights, k=20))) for i in range(count)]
    if connection.vendor == "postgresql":
        PageText.objects.add(crawl.pk, file.pk, [(*row[2:], None) for row in rows])
    else:  # one statement for them all: the test's setup is most of its time
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO crawls_pagetext (crawl_id, file_id, url, title, text) "
                               "VALUES (%s, %s, %s, %s, %s)", rows)
    return owner


@pytest.fixture(scope="module")
def pages(django_db_setup, django_db_blocker):
    """30,000 pages of one org, 5 of another (the small org's token searches among them all),
    written once for the file (the index takes seconds to fill) and removed after it."""
    rng = random.Random(36)
    words = vocabulary(rng)
    with django_db_blocker.unblock():
        add_pages("big", PAGES, words, rng)
        small = add_pages("small", 5, words, rng)
    yield small
    with django_db_blocker.unblock():
        Crawl.objects.filter(org__slug__in=("big", "small")).delete()
        Org.objects.filter(slug__in=("big", "small")).delete()


class Counted(search._work_budget):
    """The work budget, remembering what each search spent."""

    spent_by_search: list[int] = []

    def __exit__(self, *exc):
        Counted.spent_by_search.append(self.spent)
        return super().__exit__(*exc)


@pytest.fixture
def counted(monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's work budget (PostgreSQL's is a statement_timeout)")
    Counted.spent_by_search = []
    monkeypatch.setattr(search, "_work_budget", Counted)
    return Counted.spent_by_search


def test_the_reported_query_is_refused_before_the_database_is_asked(pages,
                                                                   django_assert_num_queries):
    with django_assert_num_queries(0), pytest.raises(search.QueryTooComplex):
        search.search(ATTACK, org=pages.pk)


def test_a_search_past_its_work_budget_is_cut_where_the_budget_ends(pages, counted, monkeypatch):
    # The small org's five pages among 30,000 holding the word: every match is walked.
    assert len(search.search("common", org=pages.pk)) == 5
    (walk,) = counted
    assert walk * search.WORK_BATCH < search.WORK_STEPS / 5  # far inside the budget
    monkeypatch.setattr(search, "WORK_STEPS", walk // 4 * search.WORK_BATCH)
    with pytest.raises(search.QueryTooCostly, match="work budget"):
        search.search("common", org=pages.pk)
    assert counted[-1] == walk // 4 + 1  # stopped at the first batch past the budget


def test_every_page_of_results_costs_about_what_the_first_does(pages, counted):
    first = search.search("common", limit=21)
    pages_on = [search.search("common", limit=21, offset=offset)
                for offset in (980, 2000, 9000, 10_000)]
    assert all(len(hits) == 21 for hits in [first, *pages_on])
    assert max(counted) <= max(counted[0], 1) * 10, counted
    assert max(counted) * search.WORK_BATCH < search.WORK_STEPS / 100


def test_the_most_a_query_within_the_limits_asks_stays_inside_the_budget(pages, counted):
    # Four prefixes of three letters and twelve common words, OR'ed, paged deep.
    words = " OR ".join(["common"] * 12)
    search.search(f"aaa* OR abc* OR abd* OR abe* OR {words}", org=pages.pk, offset=9000)
    assert counted[-1] * search.WORK_BATCH < search.WORK_STEPS, counted


def test_a_search_past_its_statement_timeout_is_cut_on_postgresql(pages, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's statement_timeout")
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        (before,) = cursor.fetchone()
    search.search("common", org=pages.pk)
    monkeypatch.setattr(search, "TIMEOUT_MS", 50)
    # A search of a small org can be answered in under any timeout; a statement that sleeps
    # past it inside the search stands for a costly one, whatever the machine's speed.
    real = search._postgres_search

    def slow(cursor, *args):
        cursor.execute("SELECT pg_sleep(5)")
        return real(cursor, *args)

    monkeypatch.setattr(search, "_postgres_search", slow)
    with pytest.raises(search.QueryTooCostly, match="work budget"):
        search.search("common", org=pages.pk)
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == (before,)  # the search's own timeout ended with it


def test_the_api_answers_a_search_cut_by_its_budget_with_a_400_saying_why(
        pages, client, django_user_model, monkeypatch, admin_settings):
    monkeypatch.setattr(search, "WORK_STEPS", search.WORK_BATCH)
    monkeypatch.setattr(search, "TIMEOUT_MS", 1)
    user = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(user, "reader", org=pages, read_only=True)
    answer = client.get("/api/v1/search", {"q": "common"}, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "query_too_costly"
    assert "narrow" in answer.json()["message"]


def test_a_search_counts_as_many_requests_against_its_tokens_minute(
        client, django_user_model, monkeypatch, admin_settings):
    now = dt.datetime(2026, 12, 4, 12, 0, 30, tzinfo=dt.UTC)
    clock = [now]
    for module in ("crawls.api.auth", "crawls.api.routes_search"):
        monkeypatch.setattr(f"{module}.db_now", lambda: clock[0])
    user = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(user, "reader", read_only=True, rate_limit=100)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    searches = [client.get("/api/v1/search", {"q": "lighthouse"}, **auth).status_code
                for _ in range(100 // SEARCH_COST + 1)]
    assert searches == [200] * (100 // SEARCH_COST) + [429]
    refused = client.get("/api/v1/crawls", **auth)  # the minute is spent, for every route
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert refused["Retry-After"] == "30"
    clock[0] = now + dt.timedelta(minutes=1)
    assert client.get("/api/v1/search", {"q": "lighthouse"}, **auth).status_code == 200
    # A token whose whole minute is less than one search still searches once a minute.
    _, small = ApiToken.issue(user, "small", read_only=True, rate_limit=3)
    answers = [client.get("/api/v1/search", {"q": "lighthouse"},
                          HTTP_AUTHORIZATION=f"Bearer {small}").status_code for _ in range(2)]
    assert answers == [200, 429]


def test_the_cli_says_why_a_search_was_refused_or_cut(pages, monkeypatch):
    with pytest.raises(CommandError, match="search: a prefix needs 3 characters"):
        call_command("search", "a* OR b*")
    monkeypatch.setattr(search, "WORK_STEPS", search.WORK_BATCH)
    monkeypatch.setattr(search, "TIMEOUT_MS", 1)
    with pytest.raises(CommandError, match="search: the search took more than its work budget"):
        call_command("search", "common", "--org", "small")
