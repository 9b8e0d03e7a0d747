"""POST /crawls with Idempotency-Key: a retry after a timeout queues nothing new."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from crawls.models import Crawl, CrawlEvent, IdempotencyKey

BODY = json.dumps({"seeds": ["https://example.com/"], "tags": ["cms"]})


def post(http, key: str, body: str = BODY):
    return http.post("/api/v1/crawls", content=body,
                     headers={"Idempotency-Key": key, "Content-Type": "application/json"})


def test_a_retry_with_the_same_key_and_body_returns_the_first_response(client):
    first = post(client, "order-42")
    again = post(client, "order-42")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert Crawl.objects.count() == 1 and CrawlEvent.objects.count() == 1
    other = post(client, "order-43")
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert Crawl.objects.count() == 2


def test_the_same_key_with_another_body_is_refused_and_queues_nothing(client):
    post(client, "order-42")
    refused = post(client, "order-42", json.dumps({"seeds": ["https://example.org/"]}))
    assert refused.status_code == 422
    assert refused.json() == {"code": "idempotency_key_reused",
                              "message": "Idempotency-Key 'order-42' was already used with a different request body"}
    assert Crawl.objects.count() == 1


def test_a_refused_body_stores_no_key(client):
    assert post(client, "k1", json.dumps({"seeds": ["ftp://x/"]})).status_code == 422
    assert not IdempotencyKey.objects.exists()
    assert post(client, "k1").status_code == 201


def test_keys_belong_to_their_token(api_server, client, make_token):
    post(client, "shared")
    with api_server.client(make_token()) as other:
        assert post(other, "shared").status_code == 201
    assert Crawl.objects.count() == 2


def test_concurrent_retries_with_one_key_queue_one_crawl(api_server, make_token):
    secret = make_token()

    def attempt(_):
        with api_server.client(secret) as http:
            return post(http, "burst")

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(attempt, range(6)))
    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["id"] for r in responses}) == 1
    assert Crawl.objects.count() == 1
