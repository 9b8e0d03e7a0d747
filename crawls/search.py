"""Full-text search over the archived pages' text: one query language, one `search()`, over
SQLite FTS5 or PostgreSQL full-text search (the index: migration 0017_search).

The query language (docs/cli.md, "Search"), the same on both databases:

    word            pages holding the word (case and accents do not matter)
    word*           a prefix: words starting with it
    "two words"     a phrase: the words next to each other, in that order
    a b  /  a AND b both
    a OR b          either; AND binds tighter: `a b OR c` is `(a AND b) OR c`
    -a  /  NOT a    not that one (a query needs at least one word to find, and so does each
                    side of an OR: `a OR NOT b` would be every page without b)
    ( ... )         grouping

Anything else is read as words: punctuation splits words as the index does. A query that
cannot be read (an unclosed quote or bracket, nothing to find) raises QueryError with one line;
one past the limits below (words, prefixes, a prefix's length) raises QueryTooComplex before
the database is asked, and one whose search runs past its work budget (SQLite: VM steps,
PostgreSQL: statement_timeout) raises QueryTooCostly: docs/security.md, "Search".
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass

from django.db import OperationalError, connection, transaction

from archiver.errors import ArchiverError

MARK_START, MARK_END = "\ue000", "\ue001"  # highlight marks in a snippet (private use)
MAX_QUERY = 500  # characters
# What a query may ask for. FTS5 merges the lists of every word a prefix matches (in C, where
# no progress handler runs), and again for each snippet of the page of results: over 30,000
# pages `a*` took 12 s and `a* OR b* OR ... z*` 21 s; `ab*` 0.8 s (issue 36).
MAX_WORDS = 16  # words of the query, phrases' and prefixes' included
MAX_PREFIXES = 4
MIN_PREFIX = 3  # characters a prefix's word has before its `*`
# What one search may cost, whatever it asks: on SQLite in VM instructions (work, the same on
# any machine), counted by a progress handler every WORK_BATCH; on PostgreSQL, which counts
# no such thing, in milliseconds (statement_timeout). Over 30,000 pages a one-word query
# took about 30,000 steps, walking every match of a common word to find an org's five pages
# among them 540,000 (tests/search/test_search_cost.py); a loaded machine ran 8.8 million a
# second.
WORK_STEPS = 10_000_000
WORK_BATCH = 10_000
TIMEOUT_MS = 5_000
MAX_LIMIT = 200
RANKED = 1000  # a query ranks at most this many of its matches (see _sqlite_rows)
HEADLINE_TEXT = 600  # characters of a page's text around its first match a headline reads
_WORD = re.compile(r"[^\W_]+")
_BARE = re.compile(r'[^\s"()]+')


class QueryError(ArchiverError):
    """A search query that cannot be read; the message says why, in one line."""


class QueryTooComplex(QueryError):
    """A query past MAX_WORDS, MAX_PREFIXES or MIN_PREFIX: refused before any search."""


class QueryTooCostly(QueryError):
    """A search cut by its work budget: narrow the query (a crawl, a date, rarer words)."""


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
    _check_size(tree)
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
    """FTS5 (and any index) cannot list "every page but": each AND needs a positive part,
    each side of an OR must find pages by itself, and what a NOT leaves out is checked alike."""
    if isinstance(tree, Not):
        raise QueryError("the query only says what to leave out: add a word to find")
    if not isinstance(tree, Node):
        return
    if tree.op == "or" and any(isinstance(item, Not) for item in tree.items):
        raise QueryError("each side of OR needs a word to find: 'a OR NOT b' (or 'a OR -b') "
                         "would list every page without b")
    positives = [t for t in tree.items if not isinstance(t, Not)]
    if not positives:
        raise QueryError("the query only says what to leave out: add a word to find")
    for item in tree.items:
        _check_findable(item.item if isinstance(item, Not) else item)


def _check_size(tree) -> None:
    terms = _terms(tree)
    if sum(len(term.words) for term in terms) > MAX_WORDS:
        raise QueryTooComplex(f"the query has more than {MAX_WORDS} words")
    prefixes = [term.words[-1] for term in terms if term.prefix]
    if len(prefixes) > MAX_PREFIXES:
        raise QueryTooComplex(f"the query has more than {MAX_PREFIXES} prefixes (word*)")
    short = next((word for word in prefixes if len(word) < MIN_PREFIX), None)
    if short is not None:
        raise QueryTooComplex(f"a prefix needs {MIN_PREFIX} characters before its *: "
                              f"{short}* matches too many words")


def _terms(tree) -> list[Term]:
    if isinstance(tree, Term):
        return [tree]
    if isinstance(tree, Not):
        return _terms(tree.item)
    return [term for item in tree.items for term in _terms(item)]


def to_fts5(tree) -> str:
    if isinstance(tree, Term):
        phrase = '"' + " ".join(tree.words) + '"'
        return phrase + ("*" if tree.prefix else "")
    if tree.op == "or":
        return "(" + " OR ".join(to_fts5(t) for t in tree.items) + ")"
    found = [to_fts5(t) for t in tree.items if not isinstance(t, Not)]
    left = [to_fts5(t.item) for t in tree.items if isinstance(t, Not)]
    out = "(" + " AND ".join(found) + ")"
    # NOT binds tighter than AND in FTS5: bracketed whole, `x AND (a NOT b)` keeps its sense.
    return "(" + out + "".join(f" NOT {x}" for x in left) + ")" if left else out


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
           since: dt.datetime | None = None, limit: int = 20, offset: int = 0,
           urls: list[str] | None = None) -> list[Hit]:
    """The pages matching `query`, best first (bm25 / ts_rank_cd, the title counting more
    than the text), narrowed to an org's id, a crawl's id, pages captured since, some URLs
    (crawls/search_groups.py: a result's other captures). A query
    matching more than RANKED pages ranks the first RANKED its index lists (the pages
    stored first) and lists the others after them, in that order, with rank 0."""
    tree = parse(query)
    if not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise QueryError(f"limit is 1 to {MAX_LIMIT} and offset 0 or more")
    where, params = ["1=1"], []
    for clause, value in (("c.org_id = %s", org), ("p.crawl_id = %s", crawl),
                          ("p.captured_at >= %s", since)):
        if value is not None:
            where.append(clause)
            params.append(value)
    if urls:
        where.append(f"p.url IN ({', '.join(['%s'] * len(urls))})")
        params += urls
    scope = _Scope(" AND ".join(where), params, pages=len(where) > 1, crawls=org is not None)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            rows = _postgres_rows(cursor, tree, scope, limit, offset)
        else:
            with _work_budget(connection.connection, WORK_STEPS):
                rows = _sqlite_rows(cursor, to_fts5(tree), scope, limit, offset)
    return [Hit(*row[:4], _aware(row[4]), row[5].rsplit("/", 1)[-1], row[6] or "",
                abs(float(row[7]))) for row in rows]


class _work_budget:  # noqa: N801 - used as `with _work_budget(...)`
    """SQLite's progress handler ends the statement that runs past `steps` VM instructions
    (sqlite3 raises "interrupted"): QueryTooCostly. `spent` counts batches of WORK_BATCH."""

    def __init__(self, raw, steps: int):
        self.raw, self.batches, self.spent = raw, steps // WORK_BATCH, 0

    def _spend(self) -> bool:
        self.spent += 1
        return self.spent > self.batches

    def __enter__(self):
        self.raw.set_progress_handler(self._spend, WORK_BATCH)
        return self

    def __exit__(self, kind, exc, tb):
        self.raw.set_progress_handler(None, WORK_BATCH)
        if isinstance(exc, OperationalError) and self.spent > self.batches:
            raise QueryTooCostly(_TOO_COSTLY) from None


_TOO_COSTLY = ("the search took more than its work budget: narrow it (a crawl, a date, rarer "
               "words, fewer prefixes)")


def _aware(value) -> dt.datetime | None:
    """A raw cursor's datetime: SQLite gives it naive (or as text), in UTC as Django stores it."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


@dataclass(frozen=True)
class _Scope:
    where: str  # on crawls_pagetext p and crawls_crawl c
    params: list
    pages: bool  # whether `where` names p
    crawls: bool  # whether it names c


_COLUMNS = "p.crawl_id, o.slug, p.url, p.title, p.captured_at, f.path"
_JOINS = ("JOIN crawls_crawl c ON c.id = p.crawl_id JOIN crawls_org o ON o.id = c.org_id "
          "JOIN crawls_crawlfile f ON f.id = p.file_id")

# Why a cap on ranking, on both databases: ranking reads every match (bm25 its row's size and
# hit lists, ts_rank_cd its tsvector), and a common word matches most pages. Over 100,000
# pages bm25 over every match of the most frequent words took 52 to 94 CPU-ms (1 to 4 ms over
# RANKED), and ts_rank_cd took a one-word query's p99 past 200 ms (bench/README.md, search.py). The first RANKED matches in the index's own order are the ones
# each database finds without reading the rest: FTS5's doclists are in rowid order (the order
# pages were stored, ids never reused), a GIN bitmap scan goes in the table's order (the
# order rows were stored, but for space freed by a reindex and reused). Finding the newest
# RANKED instead costs a sort of every match on PostgreSQL, or a primary-key walk that reads
# the tsvector of every row it passes: 20 to 180 ms for one word at 100,000 pages.


def _sqlite_rows(cursor, match: str, scope: _Scope, limit: int, offset: int) -> list[tuple]:
    """The ranked part first (rowids up to the RANKED-th match's), then the rest unranked."""
    cursor.execute(f"SELECT t.rowid {_sqlite_from(scope)} ORDER BY t.rowid LIMIT 1 OFFSET %s",
                   [match, *scope.params, RANKED - 1])
    found = cursor.fetchone()
    cutoff = found[0] if found else None  # None: fewer match, all are ranked
    ranked_end = offset + limit if cutoff is None else RANKED
    rows = []
    if offset < ranked_end:
        last = cutoff if cutoff is not None else _LAST_ROWID
        cursor.execute(_sqlite_sql(scope, ranked=True),
                       [match, *scope.params, last, min(offset + limit, ranked_end) - offset,
                        offset, match])
        rows += cursor.fetchall()
    if cutoff is not None and offset + limit > RANKED:
        start = max(offset - RANKED, 0)
        cursor.execute(_sqlite_sql(scope, ranked=False),
                       [match, *scope.params, cutoff, offset + limit - RANKED - start, start, match])
        rows += cursor.fetchall()
    return rows


_LAST_ROWID = 2**63 - 1


def _sqlite_from(scope: _Scope) -> str:
    # Joined to the tables only to narrow the matches: the index alone lists and ranks them.
    narrow = (("JOIN crawls_pagetext p ON p.id = t.rowid " if scope.pages else "")
              + ("JOIN crawls_crawl c ON c.id = p.crawl_id " if scope.crawls else ""))
    return (f"FROM crawls_pagetext_fts t {narrow}"
            f"WHERE crawls_pagetext_fts MATCH %s AND {scope.where}")


def _sqlite_sql(scope: _Scope, ranked: bool) -> str:
    # bm25 is lower for better matches; the title weighs 5 times the text. The snippet reads
    # a page's text: made for the page of results only, in the outer query, where each row
    # is found by its rowid and MATCH. CROSS JOIN keeps `hits` the outer loop: left to
    # itself the planner scanned every match of the MATCH there and looked each up in
    # `hits`, 300 to 700 ms for a word in most of 100,000 pages (the one-word p99).
    if ranked:
        rank, part, inner, outer = ("bm25(crawls_pagetext_fts, 5.0, 1.0)", "t.rowid <= %s",
                                    "rank, t.rowid", "hits.rank, hits.id")
    else:
        rank, part, inner, outer = "0.0", "t.rowid > %s", "t.rowid", "hits.id"
    return (f"WITH hits AS (SELECT t.rowid AS id, {rank} AS rank {_sqlite_from(scope)} "
            f"AND {part} ORDER BY {inner} LIMIT %s OFFSET %s) "
            f"SELECT {_COLUMNS}, snippet(crawls_pagetext_fts, 1, '{MARK_START}', '{MARK_END}', "
            f"'…', 24), hits.rank "
            f"FROM hits CROSS JOIN crawls_pagetext_fts ON crawls_pagetext_fts.rowid = hits.id "
            f"JOIN crawls_pagetext p ON p.id = hits.id {_JOINS} "
            f"WHERE crawls_pagetext_fts MATCH %s ORDER BY {outer}")


def _postgres_rows(cursor, tree, scope: _Scope, limit: int, offset: int) -> list[tuple]:
    # SET LOCAL lasts to the end of the transaction: a savepoint's if one is open (a test, a
    # request's), so the timeout is put back as it was once the search is done.
    try:
        with transaction.atomic():
            cursor.execute("SELECT current_setting('statement_timeout'), "
                           "set_config('statement_timeout', %s, true)", [f"{TIMEOUT_MS}ms"])
            before = cursor.fetchone()[0]
            rows = _postgres_search(cursor, tree, scope, limit, offset)
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "57014":  # query_canceled
            raise QueryTooCostly(_TOO_COSTLY) from None
        raise
    return rows


def _postgres_search(cursor, tree, scope: _Scope, limit: int, offset: int) -> list[tuple]:
    cursor.execute(_postgres_sql(scope), [to_tsquery(tree), _first_match_regex(tree),
                                          *scope.params, max(RANKED, offset + limit), limit,
                                          offset])
    return cursor.fetchall()


def _first_match_regex(tree) -> str:
    """A regular expression whose first group is the text before the first place it holds a
    word the query looks for (a phrase's first word, a prefix's start)."""
    words = [(term.words[0], term.prefix and len(term.words) == 1) for term in _positives(tree)]
    return (r"(?i)^(.*?)\m(?:" + "|".join(w + ("" if prefix else r"\M") for w, prefix in words)
            + ")")


def _positives(tree) -> list[Term]:
    if isinstance(tree, Term):
        return [tree]
    if isinstance(tree, Not):
        return []
    return [term for item in tree.items for term in _positives(item)]


def _postgres_sql(scope: _Scope) -> str:
    # Only the first RANKED matches the GIN index's bitmap finds (in the table's order: no
    # sort, the scan stops there) are ranked; a query matching fewer is ranked in full. Matches
    # past them (`n`) follow unranked, in the same scan order, so paging on still lists every
    # match once. ts_headline parses all the text it is given (8 ms of a one-word query's
    # 24 ms for 20 results of 150 words at 100,000 pages, and a page's text may be 256 k
    # characters), so it is given HEADLINE_TEXT characters around the first place the text
    # holds a word of the query (a regular expression, no parsing), or the text's start
    # when the match is in the title only.
    narrow = "JOIN crawls_crawl c ON c.id = p.crawl_id " if scope.crawls else ""
    return (f"WITH q AS (SELECT to_tsquery('simple', %s) AS q, %s::text AS first), "
            f"found AS (SELECT p.id, p.search, row_number() OVER () AS n "
            f"FROM crawls_pagetext p CROSS JOIN q {narrow}"
            f"WHERE p.search @@ q.q AND {scope.where} LIMIT %s), "
            f"hits AS (SELECT found.id, CASE WHEN n <= {RANKED} THEN ts_rank_cd(found.search, q.q) "
            f"ELSE 0 END AS rank, n FROM found CROSS JOIN q "
            f"ORDER BY n > {RANKED}, rank DESC, CASE WHEN n > {RANKED} THEN n ELSE 0 END, found.id "
            f"LIMIT %s OFFSET %s) "
            f"SELECT {_COLUMNS}, ts_headline('simple', substr(p.text, 1 + greatest(coalesce(length("
            f"substring(p.text from q.first)), 0) - {HEADLINE_TEXT // 2}, 0), {HEADLINE_TEXT}), q.q, "
            f"'StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=30, MinWords=10, "
            f"MaxFragments=2, FragmentDelimiter=\" … \"'), hits.rank "
            f"FROM hits JOIN crawls_pagetext p ON p.id = hits.id {_JOINS} CROSS JOIN q "
            f"ORDER BY hits.n > {RANKED}, hits.rank DESC, "
            f"CASE WHEN hits.n > {RANKED} THEN hits.n ELSE 0 END, p.id")
