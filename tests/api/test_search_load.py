"""Search as a denial of service, through gunicorn (issue 36): over 30,000 pages, eight
`a* OR b* OR ... z*` at once from one read-only org token held every thread for 40 s, and
another org's plain GET waited 214 s. Now each is refused before any search, the heaviest
query the limits allow is answered or cut by its work budget, and the other org is served
while they run. Statuses are counted, never times (the client's 30 s timeout is the bound)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

from crawls.api.pagination import encode
from crawls.models import Org
from tests.search.test_search_cost import ATTACK, PAGES, add_pages, vocabulary

DEEP = encode("9000")  # the cursor of results 9,000 on
HEAVIEST = "aaa* OR abc* OR abd* OR abe* OR " + " OR ".join(["common"] * 12)


def test_eight_costly_searches_at_once_leave_another_org_served(api_server, make_token,
                                                                  make_crawl):
    rng = random.Random(36)
    words = vocabulary(rng)
    add_pages("big", PAGES, words, rng)
    add_pages("small", 5, words, rng)
    Org.objects.create(slug="other", name="Other")
    make_crawl(org="other")
    attacker = make_token(org="small", read_only=True, rate_limit=1_000)
    other = make_token(org="other", read_only=True)
    with api_server.client(attacker) as searching, api_server.client(other) as plain, \
            ThreadPoolExecutor(8) as pool:
        refused = list(pool.map(lambda _: searching.get("/api/v1/search", params={"q": ATTACK}),
                                range(8)))
        heavy = [pool.submit(searching.get, "/api/v1/search", params={"q": HEAVIEST, "cursor": DEEP})
                 for _ in range(8)]
        crawls = plain.get("/api/v1/crawls")
        answers = [future.result() for future in heavy]
    assert {(r.status_code, r.json()["code"]) for r in refused} == {(400, "query_too_complex")}
    assert crawls.status_code == 200 and len(crawls.json()["items"]) == 1
    # 8 searches of 20 requests each fit the attacker's 1,000 a minute; each is answered
    # (its five pages) or cut by its budget, never left running.
    for answer in answers:
        assert answer.status_code in (200, 400), answer.text
        assert answer.status_code == 200 or answer.json()["code"] == "query_too_costly"
