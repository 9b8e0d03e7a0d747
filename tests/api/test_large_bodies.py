"""A request body past Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB), through gunicorn: the
API answers a JSON 413 in its error shape, the admin a plain 413 page; never a 500 (issue 36)."""

from __future__ import annotations

import pytest
from django.conf import settings

from crawls.models import Crawl

TOO_BIG = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/crawls"), ("PUT", "/api/v1/orgs/acme"), ("POST", "/api/v1/webhooks"),
])
def test_a_json_body_past_the_limit_is_a_json_413(client, method, path):
    body = b'{"seeds": ["https://example.com/"], "name": "' + b"x" * TOO_BIG + b'"}'
    response = client.request(method, path, content=body,
                              headers={"Content-Type": "application/json", "Idempotency-Key": "big"})
    assert response.status_code == 413, response.text[:500]
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "too_large"
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in response.json()["message"]
    assert not Crawl.objects.exists()


def test_a_form_past_the_limit_is_a_plain_413_in_the_admin(api_server, api_db):
    with api_server.client() as http:
        http.get("/admin/login/")  # its CSRF cookie, so the form reaches the body's reading
        response = http.post("/admin/login/", data={
            "username": "a", "password": "x" * TOO_BIG,
            "csrfmiddlewaretoken": http.cookies["csrftoken"]})
    assert response.status_code == 413, response.text[:500]
    assert response.headers["Content-Type"].startswith("text/plain")
    assert "too large" in response.text


def test_the_api_log_holds_no_traceback_for_a_large_body(client, api_server):
    # The server is shared with other tests, some of which log tracebacks on purpose.
    before = len(api_server.log.read_bytes())
    client.post("/api/v1/crawls", content=b"[" + b"1," * TOO_BIG + b"1]",
                headers={"Content-Type": "application/json"})
    assert b"Traceback" not in api_server.log.read_bytes()[before:]
