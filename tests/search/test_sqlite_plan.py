"""SQLite's plan for the page of results: the snippet is read by rowid for the page's rows
only. Left to itself the planner once scanned every match of a common word in the outer
query and looked each up in the ranked hits, 300 to 700 ms at 100,000 pages (crawls/search.py,
_sqlite_sql); timings would not catch that in a test, the plan does."""

from __future__ import annotations

import pytest
from django.db import connection

from crawls import search

pytestmark = pytest.mark.django_db

SCOPES = {
    "everything": search._Scope("1=1", [], pages=False, crawls=False),
    "one org's crawl": search._Scope("c.org_id = %s AND p.crawl_id = %s", [1, "c"], pages=True,
                                     crawls=True),
}


@pytest.mark.parametrize("ranked", [True, False], ids=["ranked", "unranked"])
@pytest.mark.parametrize("scope", SCOPES.values(), ids=SCOPES.keys())
def test_the_outer_query_walks_the_hits_and_reads_each_snippet_by_rowid(scope, ranked):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plan")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + search._sqlite_sql(scope, ranked),
                       ["word", *scope.params, 5, 20, 0, "word"])
        outer = [detail for _, parent, _, detail in cursor.fetchall() if parent == 0]
    (fts,) = [i for i, d in enumerate(outer) if d.startswith("SCAN crawls_pagetext_fts")]
    assert outer.index("SCAN hits") < fts, outer
    # FTS5's index string: "=" is a rowid equality, "M" the MATCH.
    assert outer[fts].rsplit(":", 1)[1].startswith("="), outer
