"""The query parser fuzzed (issue 36: `a OR NOT b` was a 500): any text is a result or a
QueryError, never a database error; and a query built of words, prefixes, AND, OR, NOT, `-`
and brackets finds exactly the pages a plain Python reading of it finds, or is refused with
a reason. tests/search/test_search_postgres.py runs this file again on PostgreSQL."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawls import search
from tests.fuzzing import FUZZ, JUNK_TEXT
from tests.search.waczs import real_crawler_page

pytestmark = pytest.mark.django_db

WORDS = ["lighthouse", "lights", "keeper", "harbour", "bread", "bakery"]
# Page i holds the words whose bit is set in i: every combination of the six, 64 pages.
PAGE_WORDS = {f"https://a.test/{i}": {w for bit, w in enumerate(WORDS) if i >> bit & 1}
              for i in range(64)}
SYNTAX = ["AND", "OR", "NOT", "-", "(", ")", '"', "*", "NEAR", ":", "^", "+", "{", "}", "'",
          "!", "&", "|", "<->", ":*", "\\", "\x00", "é", "ß", "ﬁ", "٣", "𝟘", "_"]


@pytest.fixture
def pages(indexed):
    indexed([real_crawler_page(url, "", " ".join(sorted(words)) or "nothing")
             for url, words in PAGE_WORDS.items()])


def found(query: str) -> set[str]:
    return {hit.url for hit in search.search(query, limit=search.MAX_LIMIT)}


@FUZZ
@given(text=st.one_of(JUNK_TEXT, st.lists(st.sampled_from(WORDS + SYNTAX), max_size=12).map(" ".join),
                      st.lists(st.sampled_from(WORDS + SYNTAX), max_size=12).map("".join)))
def test_any_text_is_a_result_or_a_reason(pages, text):
    try:
        search.search(text[: search.MAX_QUERY])
    except search.QueryError as exc:
        assert str(exc) and "\n" not in str(exc)


# A query and what it means, built together: (text, the set of pages it finds).
def _word(draw_word: str, prefix_at: int | None):
    if prefix_at is None:
        return draw_word, {u for u, words in PAGE_WORDS.items() if draw_word in words}
    stem = draw_word[:prefix_at]
    return f"{stem}*", {u for u, words in PAGE_WORDS.items() if any(w.startswith(stem) for w in words)}


TERMS = st.builds(_word, st.sampled_from(WORDS), st.one_of(st.none(), st.integers(3, 6)))
EVERY = set(PAGE_WORDS)


def _extend(inner):
    group = inner.map(lambda q: (f"({q[0]})", q[1]))
    atom = st.one_of(TERMS, group)
    negated = st.one_of(atom.map(lambda q: (f"NOT {q[0]}", EVERY - q[1])),
                        TERMS.map(lambda q: (f"-{q[0]}", EVERY - q[1])))
    both = st.lists(st.one_of(atom, negated), min_size=1, max_size=3).map(_and)
    return st.lists(both, min_size=1, max_size=3).map(_or)


def _and(items):
    text = " ".join(q[0] for q in items)
    return text, set.intersection(*(q[1] for q in items))


def _or(items):
    return " OR ".join(q[0] for q in items), set.union(*(q[1] for q in items))


QUERIES = st.recursive(TERMS, _extend, max_leaves=8)


@FUZZ
@given(query=QUERIES)
def test_a_query_finds_what_it_says_or_is_refused_with_a_reason(pages, query):
    text, expected = query
    try:
        assert found(text) == expected, text
    except search.QueryError as exc:
        assert str(exc)
