"""The OpenAPI schema, the docs page, and schemathesis fuzzing every operation against it.

The fuzzing sends bounded numbers of generated requests (valid and invalid ones) with
tokens of different powers, and fails on any 5xx, any response its schema does not
describe, and any refused request (4xx) after which the database is not what it was.
"""

from __future__ import annotations

import hashlib
import re
import time

import httpx
import pytest
import schemathesis
from django.db import connection
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from crawls.models import CrawlFile, CrawlStatus, Schedule, Snapshot, SnapshotStatus, Webhook

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# Adding a webhook resolves its host name (the SSRF check): the only traffic that would
# leave 127.0.0.1. Its refusals are tested by hand in test_orgs_schedules_webhooks.py.
NOT_FUZZED = {("POST", "/api/v1/webhooks")}
EXAMPLES = 15  # per operation and mode: about 900 requests, well under a minute
# Rate-limit bookkeeping changes with every request, refused or not.
TOKEN_USAGE = re.compile(r"window_start|window_count|last_used_at")


def test_the_schema_is_served_and_names_every_operation(api_server):
    schema = httpx.get(f"{api_server.url}/api/v1/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    assert set(paths["/api/v1/crawls"]) == {"get", "post"}
    assert "/api/v1/files/{file_id}/download" in paths
    assert "/api/v1/webhooks/deliveries/{delivery_id}/replay" in paths
    create = paths["/api/v1/crawls"]["post"]
    assert "seeds" in create["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert {"401", "403", "404", "409", "422", "429"} <= set(paths["/api/v1/crawls/{crawl_id}/pause"]["post"]["responses"])


def test_the_docs_page_loads_nothing_from_other_hosts(api_server):
    page = httpx.get(f"{api_server.url}/api/v1/docs")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    for source in sources:
        assert httpx.get(f"{api_server.url}{source}").status_code == 200, source


def test_an_unknown_api_path_is_a_json_404(client):
    response = client.get("/api/v1/nothing/here")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "message": "no API endpoint /api/v1/nothing/here"}


def row_queries() -> list[str]:
    """One SELECT of every row per table that the API may write (less token usage counters)."""
    queries = []
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.table_names(cursor)):
            if not table.startswith(("crawls_", "auth_", "django_session")):
                continue
            columns = [c.name for c in connection.introspection.get_table_description(cursor, table)
                       if not (table == "crawls_apitoken" and TOKEN_USAGE.fullmatch(c.name))]
            quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
            queries.append(f"SELECT {quoted} FROM {connection.ops.quote_name(table)} ORDER BY 1")  # noqa: S608
    return queries


def database_fingerprint(queries: list[str]) -> str:
    """A hash of every row those queries read."""
    digest = hashlib.sha256()
    with connection.cursor() as cursor:
        for query in queries:
            cursor.execute(query)
            digest.update(f"{query}{cursor.fetchall()!r}".encode())
    return digest.hexdigest()


@pytest.fixture
def population(make_crawl, make_org, make_user, make_token, api_server):
    """A few rows of every kind, and tokens from all-powerful to powerless."""
    make_org("acme")
    for status in (CrawlStatus.QUEUED, CrawlStatus.RUNNING, CrawlStatus.PAUSED, CrawlStatus.COMPLETE,
                   CrawlStatus.FAILED):
        crawl = make_crawl(status, tags=["t"])
    Snapshot.objects.create(crawl=crawl, url="https://example.com/x", status=SnapshotStatus.FAILED)
    path = api_server.data_dir / "archives" / crawl.id / "a.wacz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"0123456789")
    CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.id}/a.wacz", size=10, sha256="0" * 64)
    Schedule.objects.create(org=crawl.org, cron="0 3 * * *", config=crawl.config)
    Webhook.objects.create(url="https://hooks.example.invalid/", secret="s")
    return [
        make_token(),
        make_token(read_only=True),
        make_token(org="acme"),
        make_token(make_user("powerless")),
    ]


@pytest.mark.slow
def test_fuzzing_finds_no_5xx_no_schema_violation_and_no_refused_write(api_server, population):
    schema = schemathesis.openapi.from_url(f"{api_server.url}/api/v1/openapi.json")
    started, runs, queries = time.monotonic(), 0, row_queries()
    with httpx.Client(base_url=api_server.url, timeout=30) as http:
        for result in schema.get_all_operations():
            operation = result.ok()
            if (operation.method.upper(), operation.path) in NOT_FUZZED:
                continue
            for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
                fuzz(http, operation, mode, population, queries)
                runs += 1
    assert runs >= 40
    assert time.monotonic() - started < 360  # 120 s on a developer machine; this holds three times slower


def fuzz(http: httpx.Client, operation, mode, secrets: list[str], queries: list[str]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode), secret=st.sampled_from(secrets))
    def one(case, secret):
        before = database_fingerprint(queries)
        headers = {**(case.headers or {}), "Authorization": f"Bearer {secret}"}
        response = case.call(base_url=str(http.base_url).rstrip("/"), headers=headers)
        if response.status_code == 414 and "Request Line is too large" in response.text:
            # gunicorn refuses request lines over 4 KiB before Django sees them: such a
            # request never reaches the API, so its schema has nothing to say about it.
            reject()
        case.validate_response(response, checks=CHECKS)
        if response.status_code >= 400:
            assert database_fingerprint(queries) == before, (
                f"{case.method} {case.formatted_path} was refused ({response.status_code}) "
                f"but changed the database: {response.text[:300]}")

    one()
