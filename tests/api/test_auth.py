"""Tokens, permissions, org scope, sessions and the rate limit, through gunicorn."""

from __future__ import annotations

import re

import httpx

from crawls.models import ApiToken, Crawl, CrawlFile, CrawlStatus
from tests.api.servers import http_client

S = CrawlStatus


def test_without_a_valid_token_every_request_is_401_json(api_server, api_db, make_token, make_crawl):
    crawl = make_crawl()
    secret = make_token()
    for headers in ({}, {"Authorization": "Bearer nonsense"},
                    {"Authorization": f"Bearer {secret[:-2]}xx"}, {"Authorization": f"Basic {secret}"}):
        response = httpx.get(f"{api_server.url}/api/v1/crawls/{crawl.id}", headers=headers)
        assert response.status_code == 401
        assert response.json()["code"] == "unauthorized"
    refused = httpx.post(f"{api_server.url}/api/v1/crawls/{crawl.id}/pause")
    assert refused.status_code == 401
    crawl.refresh_from_db()
    assert crawl.status == S.QUEUED


def test_a_revoked_token_is_refused_at_once(api_server, api_db, make_token):
    secret = make_token()
    with api_server.client(secret) as http:
        assert http.get("/api/v1/crawls").status_code == 200
        ApiToken.objects.get().revoke(ApiToken.objects.get().created_at)
        assert http.get("/api/v1/crawls").status_code == 401


def test_a_read_only_token_reads_but_cannot_pause(api_server, api_db, make_token, make_crawl):
    crawl = make_crawl()
    secret = make_token(read_only=True)
    prefix = ApiToken.objects.get().prefix
    with api_server.client(secret) as http:
        assert http.get(f"/api/v1/crawls/{crawl.id}").status_code == 200
        response = http.post(f"/api/v1/crawls/{crawl.id}/pause")
        assert response.status_code == 403
        assert response.json() == {"code": "read_only_token", "message": f"token {prefix} is read-only"}
        assert http.post("/api/v1/crawls", json={"seeds": ["https://example.com/"]}).status_code == 403
    crawl.refresh_from_db()
    assert crawl.status == S.QUEUED and Crawl.objects.count() == 1


def test_the_users_django_permissions_decide_each_operation(api_server, api_db, make_user, make_token, make_crawl):
    crawl = make_crawl()
    viewer = make_user("viewer", "view_crawl")
    with api_server.client(make_token(viewer)) as http:
        assert http.get(f"/api/v1/crawls/{crawl.id}").status_code == 200
        response = http.post(f"/api/v1/crawls/{crawl.id}/pause")
        assert response.status_code == 403
        assert response.json()["message"] == "user 'viewer' does not have the permission crawls.change_crawl"
        assert http.delete(f"/api/v1/crawls/{crawl.id}").status_code == 403
        assert http.get("/api/v1/orgs").status_code == 403
    operator = make_user("operator", "view_crawl", "change_crawl")
    with api_server.client(make_token(operator)) as http:
        assert http.post(f"/api/v1/crawls/{crawl.id}/pause").status_code == 200
        assert http.post("/api/v1/crawls", json={"seeds": ["https://example.com/"]}).status_code == 403
    nobody = make_user("nobody")
    with api_server.client(make_token(nobody)) as http:
        assert http.get("/api/v1/crawls").status_code == 403
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED and Crawl.objects.count() == 1


def test_an_org_scoped_token_never_sees_another_orgs_crawls(api_server, api_db, make_token, make_crawl, make_org):
    make_org("acme")
    make_org("globex")
    ours = make_crawl(org="acme")
    theirs = make_crawl(S.COMPLETE, org="globex")
    their_file = CrawlFile.objects.create(crawl=theirs, path=f"archives/{theirs.id}/x.wacz", size=1, sha256="0" * 64)
    with api_server.client(make_token(org="acme")) as http:
        assert [c["id"] for c in http.get("/api/v1/crawls").json()["items"]] == [ours.id]
        assert http.get("/api/v1/crawls", params={"org": "globex"}).json()["items"] == []
        for method, path in (("GET", f"/crawls/{theirs.id}"), ("POST", f"/crawls/{theirs.id}/retry"),
                             ("DELETE", f"/crawls/{theirs.id}"), ("GET", f"/crawls/{theirs.id}/pages"),
                             ("GET", f"/files/{their_file.pk}"), ("GET", f"/files/{their_file.pk}/download"),
                             ("GET", "/orgs/globex")):
            response = http.request(method, f"/api/v1{path}")
            assert response.status_code == 404, (method, path, response.text)
        assert [o["slug"] for o in http.get("/api/v1/orgs").json()] == ["acme"]
        created = http.post("/api/v1/crawls", json={"seeds": ["https://example.com/"]})
        assert created.json()["org"] == "acme"
        other = http.post("/api/v1/crawls", json={"seeds": ["https://example.com/"], "org": "globex"})
        assert other.status_code == 404
    assert Crawl.objects.filter(org__slug="globex").count() == 1


def test_a_staff_session_uses_the_api_with_csrf_for_unsafe_methods(api_server, api_db, make_user, make_crawl):
    crawl = make_crawl()
    make_user("staff", "view_crawl", "change_crawl", staff=True, password="pw-for-tests-only")
    with http_client(api_server.url, follow_redirects=False) as browser:
        login = browser.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        done = browser.post("/admin/login/", data={"username": "staff", "password": "pw-for-tests-only",
                                                   "csrfmiddlewaretoken": token, "next": "/admin/"})
        assert done.status_code == 302
        assert browser.get(f"/api/v1/crawls/{crawl.id}").status_code == 200
        no_csrf = browser.post(f"/api/v1/crawls/{crawl.id}/pause")
        assert no_csrf.status_code == 403
        crawl.refresh_from_db()
        assert crawl.status == S.QUEUED
        with_csrf = browser.post(f"/api/v1/crawls/{crawl.id}/pause",
                                 headers={"X-CSRFToken": browser.cookies["csrftoken"],
                                          "Referer": f"{api_server.url}/admin/"})
        assert with_csrf.status_code == 200, with_csrf.text
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED


def test_a_session_of_a_user_who_is_not_staff_is_refused(api_server, api_db, make_user):
    from django.contrib.sessions.backends.db import SessionStore

    user = make_user("visitor", "view_crawl", password="pw-for-tests-only")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    with http_client(api_server.url, cookies={"sessionid": session.session_key}) as browser:
        assert browser.get("/api/v1/crawls").status_code == 401


def test_a_token_over_its_rate_limit_gets_429_with_retry_after(api_server, api_db, make_token):
    secret = make_token(rate_limit=3)
    with api_server.client(secret) as http:
        statuses = [http.get("/api/v1/crawls").status_code for _ in range(3)]
        limited = http.get("/api/v1/crawls")
        if limited.status_code == 200:  # the minute turned during the first three
            limited = [http.get("/api/v1/crawls") for _ in range(3)][-1]
    assert statuses == [200, 200, 200]
    assert limited.status_code == 429
    assert limited.json()["code"] == "rate_limited"
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    token = ApiToken.objects.get()
    assert token.last_used_at is not None and token.window_count == 3
    with api_server.client(make_token()) as other:  # the limit is per token
        assert other.get("/api/v1/crawls").status_code == 200


def test_the_token_command_prints_the_secret_once_lists_and_revokes(api_server, api_db, make_user, make_org):
    make_user("carol", "view_crawl")
    make_org("acme")
    created = api_server.manage("token", "create", "--user", "carol", "--org", "acme", "--read-only", "cms")
    secret = created.stdout.strip()
    assert secret.startswith("arch_") and "not shown again" in created.stderr
    token = ApiToken.objects.get()
    assert token.org.slug == "acme" and token.read_only and secret not in token.secret_hash
    listed = api_server.manage("token", "list").stdout
    assert token.prefix in listed and "read-only" in listed and secret not in listed
    with api_server.client(secret) as http:
        assert http.get("/api/v1/crawls").status_code == 200
        assert api_server.manage("token", "revoke", token.prefix).stdout.strip() == f"revoked token {token.prefix} (cms)"
        assert http.get("/api/v1/crawls").status_code == 401
    again = api_server.manage("token", "revoke", token.prefix, check=False)
    assert again.returncode == 1 and f"token {token.prefix} is already revoked" in again.stderr
    unknown = api_server.manage("token", "create", "--user", "nobody", "x", check=False)
    assert unknown.returncode == 1 and "no user 'nobody'" in unknown.stderr


def test_a_token_added_in_the_admin_shows_its_secret_once_and_works(api_server, api_db, make_user):
    make_user("root", superuser=True, password="pw-for-tests-only")
    with http_client(api_server.url, follow_redirects=True) as browser:
        login = browser.get("/admin/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        browser.post("/admin/login/", data={"username": "root", "password": "pw-for-tests-only",
                                            "csrfmiddlewaretoken": csrf, "next": "/admin/"})
        form = browser.get("/admin/crawls/apitoken/add/")
        assert form.status_code == 200
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        user_id = ApiToken._meta.get_field("user").related_model.objects.get(username="root").pk
        saved = browser.post("/admin/crawls/apitoken/add/", data={
            "csrfmiddlewaretoken": csrf, "user": user_id, "name": "from-admin", "rate_limit": 600})
        assert saved.status_code == 200
        secrets = re.findall(r"arch_[0-9a-f]{8}_[A-Za-z0-9_-]+", saved.text)
        assert len(secrets) == 1
        token = ApiToken.objects.get()
        assert token.name == "from-admin" and secrets[0] not in token.secret_hash
        assert secrets[0] not in browser.get(f"/admin/crawls/apitoken/{token.pk}/change/").text
    with api_server.client(secrets[0]) as http:
        assert http.get("/api/v1/crawls").status_code == 200
