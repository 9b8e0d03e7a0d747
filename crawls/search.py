"""Full-text search over the archived pages' text: one query language, one `search()`, over
SQLite FTS5 or PostgreSQL full-text search (the index: migration 0017_search).

The query language (docs/cli.md, "Search"), the same on both databases:

    word            pages holding the word (case and accents do not matter)
    word*           a prefix: words starting with it
    "two words"     a phrase: the words next to each other, in that order
    a b  /  a AND b both
    a OR b          either; AND binds tighter: `a b OR c` is `(a AND b) OR c`
    -a  /  NOT a    not that one (a query needs at least one word to find)
    ( ... )         grouping

Anything else is read as words: punctuation splits words as the index does. A query that
cannot be read (an unclosed quote or bracket, nothing to find) raises QueryError with one line.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass

from django.db import connection

from archiver.errors import ArchiverError

MARK_START, MARK_END = "\ue000", "\ue001"  # highlight marks in a snippet (private use)
MAX_QUERY = 500  # characters
MAX_LIMIT = 200
RANKED = 1000  # PostgreSQL ranks at most this many matches of a query (_postgres_sql)
_WORD = re.compile(r"[^\W_]+")
_BARE = re.compile(r'[^\s"()]+')


class QueryError(ArchiverError):
    """A search query that cannot be read; the message says why, in one line."""


# --- the query language: parsed into a tree, rendered for each database ---------------------


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # one word, or a phrase
    prefix: bool = False


@dataclass(frozen=True)
class Node:
    op: str  # "and", "or"
    items: tuple  # of Term | Node | Not


@dataclass(frozen=True)
class Not:
    item: object


def parse(query: str) -> Term | Node:
    """The tree of `query`, or QueryError."""
    if len(query) > MAX_QUERY:
        raise QueryError(f"the query is longer than {MAX_QUERY} characters")
    tokens = _tokens(query)
    tree, rest = _or(tokens, 0)
    if rest < len(tokens):
        raise QueryError("a closing bracket ')' has no opening one")
    if tree is None:
        raise QueryError("the query has no word to search for")
    _check_findable(tree)
    return tree


def _tokens(query: str) -> list[tuple[str, object]]:
    out, i = [], 0
    while i < len(query):
        if query[i].isspace():
            i += 1
            continue
        if query[i] == '"':
            end = query.find('"', i + 1)
            if end < 0:
                raise QueryError('a quote (") is not closed')
            words = tuple(w.lower() for w in _WORD.findall(query[i + 1:end]))
            prefix = query[end + 1:end + 2] == "*"
            out.append(("term", Term(words, prefix)) if words else ("skip", None))
            i = end + 1 + prefix
        elif query[i] in "()":
            out.append((query[i], None))
            i += 1
        else:
            m = _BARE.match(query, i)
            out.append(_word_token(m.group()))
            i = m.end()
    return [t for t in out if t[0] != "skip"]


def _word_token(raw: str) -> tuple[str, object]:
    if raw in ("AND", "OR", "NOT"):
        return (raw, None)
    negated = raw.startswith("-") and len(raw) > 1
    body = raw[1:] if negated else raw
    words = tuple(w.lower() for w in _WORD.findall(body))
    if not words:
        return ("skip", None)
    term = ("term", Term(words, body.endswith("*")))
    return ("-", term) if negated else term


def _or(tokens, i):
    items = []
    while True:
        item, i = _and(tokens, i)
        if item is not None:
            items.append(item)
        if i < len(tokens) and tokens[i][0] == "OR":
            i += 1
            continue
        break
    if not items:
        return None, i
    return (items[0] if len(items) == 1 else Node("or", tuple(items))), i


def _and(tokens, i):
    items = []
    while i < len(tokens) and tokens[i][0] not in ("OR", ")"):
        kind = tokens[i][0]
        if kind == "AND":
            i += 1
            continue
        negate = kind in ("NOT", "-")
        if kind == "NOT":
            i += 1
        item, i = _atom(tokens, i)
        if item is not None:
            items.append(Not(item) if negate else item)
    if not items:
        return None, i
    return (items[0] if len(items) == 1 else Node("and", tuple(items))), i


def _atom(tokens, i):
    if i >= len(tokens):
        return None, i
    kind, value = tokens[i]
    if kind == "-":
        return value[1], i + 1
    if kind == "term":
        return value, i + 1
    if kind == "(":
        inner, i = _or(tokens, i + 1)
        if i >= len(tokens) or tokens[i][0] != ")":
            raise QueryError("a bracket '(' is not closed")
        return inner, i + 1
    return None, i + 1  # a stray NOT/AND before ')' or OR: nothing to add


def _check_findable(tree) -> None:
    """FTS5 (and any index) cannot list "every page but": each AND needs a positive part."""
    if isinstance(tree, Not):
        raise QueryError("the query only says what to leave out: add a word to find")
    if isinstance(tree, Node):
        positives = [t for t in tree.items if not isinstance(t, Not)]
        if not positives:
            raise QueryError("the query only says what to leave out: add a word to find")
        for item in positives:
            _check_findable(item)


def to_fts5(tree) -> str:
    if isinstance(tree, Term):
        phrase = '"' + " ".join(tree.words) + '"'
        return phrase + ("*" if tree.prefix else "")
    if tree.op == "or":
        return "(" + " OR ".join(to_fts5(t) for t in tree.items) + ")"
    found = [to_fts5(t) for t in tree.items if not isinstance(t, Not)]
    left = [to_fts5(t.item) for t in tree.items if isinstance(t, Not)]
    out = "(" + " AND ".join(found) + ")"
    return out + "".join(f" NOT {x}" for x in left)


def to_tsquery(tree) -> str:
    if isinstance(tree, Term):
        lexemes = [f"'{w}'" for w in tree.words]
        if tree.prefix:
            lexemes[-1] += ":*"
        return "(" + " <-> ".join(lexemes) + ")"
    if isinstance(tree, Not):
        return "!" + to_tsquery(tree.item)
    joiner = " | " if tree.op == "or" else " & "
    return "(" + joiner.join(to_tsquery(t) for t in tree.items) + ")"


# --- the search ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    crawl_id: str
    org: str
    url: str
    title: str
    captured_at: dt.datetime | None
    filename: str
    snippet: str  # plain text, the matches between MARK_START and MARK_END
    rank: float  # higher is better (bm25 made positive, or ts_rank_cd)

    def snippet_html(self) -> str:
        """The snippet escaped, with only the highlight marks as <mark>."""
        return (html.escape(self.snippet).replace(MARK_START, "<mark>")
                .replace(MARK_END, "</mark>"))

    def snippet_text(self) -> str:
        return self.snippet.replace(MARK_START, "").replace(MARK_END, "")

    def as_dict(self) -> dict:
        return {"crawl": self.crawl_id, "org": self.org, "url": self.url, "title": self.title,
                "captured_at": self.captured_at.isoformat() if self.captured_at else None,
                "file": self.filename, "snippet": self.snippet_text(),
                "snippet_html": self.snippet_html(), "rank": self.rank}


def search(query: str, *, org: int | None = None, crawl: str | None = None,
           since: dt.datetime | None = None, limit: int = 20, offset: int = 0) -> list[Hit]:
    """The pages matching `query`, best first (bm25 / ts_rank_cd, the title counting more
    than the text), narrowed to an org's id, a crawl's id, pages captured since."""
    tree = parse(query)
    if not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise QueryError(f"limit is 1 to {MAX_LIMIT} and offset 0 or more")
    where, params = ["1=1"], []
    for clause, value in (("c.org_id = %s", org), ("p.crawl_id = %s", crawl),
                          ("p.captured_at >= %s", since)):
        if value is not None:
            where.append(clause)
            params.append(value)
    if connection.vendor == "postgresql":
        found = max(RANKED, offset + limit)
        sql = _postgres_sql(" AND ".join(where))
        args = [to_tsquery(tree), *params, found, limit, offset]
    else:
        match = to_fts5(tree)
        sql = _sqlite_sql(" AND ".join(where), pages=len(where) > 1, crawls=org is not None)
        args = [match, *params, limit, offset, match]
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        rows = cursor.fetchall()
    return [Hit(*row[:4], _aware(row[4]), row[5].rsplit("/", 1)[-1], row[6] or "",
                abs(float(row[7]))) for row in rows]


def _aware(value) -> dt.datetime | None:
    """A raw cursor's datetime: SQLite gives it naive (or as text), in UTC as Django stores it."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


_COLUMNS = "p.crawl_id, o.slug, p.url, p.title, p.captured_at, f.path"
_JOINS = ("JOIN crawls_crawl c ON c.id = p.crawl_id JOIN crawls_org o ON o.id = c.org_id "
          "JOIN crawls_crawlfile f ON f.id = p.file_id")


def _sqlite_sql(where: str, pages: bool, crawls: bool) -> str:
    # bm25 is lower for better matches; the title weighs 5 times the text. A common word
    # matches most pages: they are ranked on the index alone (joined to the tables only to
    # narrow them), and the snippet, which reads a page's text, is made for the page of
    # results only, in the outer query (its rowid and MATCH find each row directly).
    narrow = (("JOIN crawls_pagetext p ON p.id = t.rowid " if pages else "")
              + ("JOIN crawls_crawl c ON c.id = p.crawl_id " if crawls else ""))
    return (f"WITH hits AS (SELECT t.rowid AS id, bm25(crawls_pagetext_fts, 5.0, 1.0) AS rank "
            f"FROM crawls_pagetext_fts t {narrow}WHERE crawls_pagetext_fts MATCH %s AND {where} "
            f"ORDER BY rank, t.rowid LIMIT %s OFFSET %s) "
            f"SELECT {_COLUMNS}, snippet(crawls_pagetext_fts, 1, '{MARK_START}', '{MARK_END}', "
            f"'…', 24), hits.rank "
            f"FROM hits JOIN crawls_pagetext_fts ON crawls_pagetext_fts.rowid = hits.id "
            f"JOIN crawls_pagetext p ON p.id = hits.id {_JOINS} "
            f"WHERE crawls_pagetext_fts MATCH %s ORDER BY hits.rank, p.id")


def _postgres_sql(where: str) -> str:
    # A common word matches most pages, and ts_rank_cd reads each match's tsvector (out of
    # line, in TOAST): over 100,000 pages that alone took a one-word query's p99 past 200 ms
    # (bench/search.py). So only the first RANKED matches the GIN index's bitmap finds (in the
    # table's order: no sort, the scan stops there) are ranked; a query matching fewer is
    # ranked in full, as before. Matches past them (`n`) follow unranked, in the same scan
    # order, so paging on still lists every match once. ts_headline parses a page's text
    # again: only for the page of results, in the outer query.
    return (f"WITH q AS (SELECT to_tsquery('simple', %s) AS q), "
            f"found AS (SELECT p.id, p.search, row_number() OVER () AS n "
            f"FROM crawls_pagetext p CROSS JOIN q JOIN crawls_crawl c ON c.id = p.crawl_id "
            f"WHERE p.search @@ q.q AND {where} LIMIT %s), "
            f"hits AS (SELECT found.id, CASE WHEN n <= {RANKED} THEN ts_rank_cd(found.search, q.q) "
            f"ELSE 0 END AS rank, n FROM found CROSS JOIN q "
            f"ORDER BY n > {RANKED}, rank DESC, CASE WHEN n > {RANKED} THEN n ELSE 0 END, found.id "
            f"LIMIT %s OFFSET %s) "
            f"SELECT {_COLUMNS}, ts_headline('simple', left(p.text, 100000), q.q, "
            f"'StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=30, MinWords=10, "
            f"MaxFragments=2, FragmentDelimiter=\" … \"'), hits.rank "
            f"FROM hits JOIN crawls_pagetext p ON p.id = hits.id {_JOINS} CROSS JOIN q "
            f"ORDER BY hits.n > {RANKED}, hits.rank DESC, "
            f"CASE WHEN hits.n > {RANKED} THEN hits.n ELSE 0 END, p.id")
