"""/crawls through gunicorn: create, list, read, every action, delete, pages and logs."""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys

import pytest

from archiver.errors import ConfigError
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, CrawlLog, CrawlStatus, Snapshot, SnapshotStatus
from tests.api.servers import ROOT

S = CrawlStatus


def test_a_crawl_created_with_its_full_config_is_queued_with_it(api_db, client):
    body = {"seeds": ["https://example.com/"], "depth": 2, "page_limit": 1000, "size_limit": 2 * 10**9,
            "time_limit": 7200, "scope_type": "host", "include": ["example"], "exclude": [r"\.pdf$"],
            "workers": 2, "scale": 3, "extra_hops": 1, "user_agent": "UA", "use_robots": True,
            "tags": ["weekly", "weekly", "news"]}
    response = client.post("/api/v1/crawls", json=body)
    assert response.status_code == 201, response.text
    out = response.json()
    crawl = Crawl.objects.get(pk=out["id"])
    assert crawl.status == S.QUEUED and crawl.org.slug == "default" and crawl.scale == 3
    assert crawl.tags == ["weekly", "news"]
    assert crawl.config["depth"] == 2 and crawl.config["exclude"] == [r"\.pdf$"]
    assert crawl.config["use_robots"] is True and crawl.config["user_agent"] == "UA"
    assert out["status"] == "queued" and out["limits"]["page_limit"] == 1000
    assert out["config"] == crawl.config


@pytest.mark.parametrize("body", [
    {"seeds": ["ftp://example.com/"]},
    {"seeds": ["https://example.com/"], "depth": -5},
    {"seeds": ["https://example.com/"], "exclude": ["("]},
    {"seeds": ["https://example.com/"], "colour": "red"},
    {"seeds": []},
    {"depth": 1},
])
def test_an_invalid_config_is_refused_with_crawlconfig_parses_sentence_and_nothing_is_written(
        api_db, client, body):
    with pytest.raises(ConfigError) as refused:
        CrawlConfig.parse(**body)
    response = client.post("/api/v1/crawls", json=body)
    assert response.status_code == 422
    assert response.json() == {"code": "invalid", "message": str(refused.value)}
    assert not Crawl.objects.exists()


@pytest.mark.parametrize(("path", "extra"), [("/api/v1/crawls", {}), ("/api/v1/schedules", {"cron": "@daily"})])
@pytest.mark.parametrize(("field", "value", "message"), [
    ("browser", "yes", "Input should be a valid boolean"), ("qa", "true", "Input should be a valid boolean"),
    ("use_robots", 1, "Input should be a valid boolean"), ("depth", True, "Input should be a valid integer"),
    ("workers", "2", "Input should be a valid integer"), ("page_limit", 10.0, "Input should be a valid integer"),
])
def test_a_boolean_or_whole_number_given_as_another_json_type_is_422(api_db, client, path, extra, field,
                                                                     value, message):
    response = client.post(path, json={"seeds": ["https://example.com/"], field: value, **extra})
    assert response.status_code == 422, response.json()
    assert response.json() == {"code": "invalid", "message": f"{field}: {message}"}
    assert not Crawl.objects.exists()


@pytest.mark.parametrize(("body", "message"), [
    ({"seeds": ["https://example.com/"], "tags": [""]}, "--tag: tag '': a tag is 1 to 100 characters, without control characters"),
    ([1, 2], "the request body must be a JSON object"),
    ({"seeds": ["https://example.com/"], "tags": "news"}, "org must be a string and tags a list of strings"),
])
def test_invalid_tags_or_body_are_refused(api_db, client, body, message):
    response = client.post("/api/v1/crawls", json=body)
    assert response.status_code == 422
    assert response.json() == {"code": "invalid", "message": message}
    assert not Crawl.objects.exists()


@pytest.mark.parametrize("path", ["/api/v1/crawls", "/api/v1/schedules", "/api/v1/webhooks",
                                  "/api/v1/crawls/{crawl}/scale", "/api/v1/crawls/{crawl}/exclusions"])
def test_a_body_that_is_not_json_is_a_bad_request_on_every_endpoint(api_db, client, make_crawl, path):
    crawl = make_crawl(status="running")
    response = client.post(path.format(crawl=crawl.pk), content=b"{not json",
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["code"] == "bad_request"
    assert Crawl.objects.count() == 1


def test_creating_a_crawl_wakes_the_runner(api_server, api_db, client):
    path = api_server.data_dir / "run" / "wake.sock"
    path.parent.mkdir(exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as runner:
        runner.bind(str(path))
        runner.settimeout(10)
        try:
            assert client.post("/api/v1/crawls", json={"seeds": ["https://example.com/"]}).status_code == 201
            assert runner.recv(16) == b"!"
        finally:
            path.unlink()


def test_an_unknown_org_is_not_found_with_the_clis_sentence(api_db, client):
    response = client.post("/api/v1/crawls", json={"seeds": ["https://example.com/"], "org": "acme"})
    assert response.status_code == 404
    assert response.json() == {"code": "not_found",
                               "message": "no org 'acme' (create it with: archiver org set acme)"}


def test_the_list_filters_by_state_org_and_tag(api_db, client, make_crawl, make_org):
    make_org("acme")
    queued = make_crawl(tags=["news"])
    running = make_crawl(S.RUNNING, org="acme", tags=["news", "daily"])
    done = make_crawl(S.COMPLETE, tags=["daily"])

    def ids(**params):
        response = client.get("/api/v1/crawls", params=params)
        assert response.status_code == 200, response.text
        return [c["id"] for c in response.json()["items"]]

    assert ids() == [done.id, running.id, queued.id]
    assert ids(state="running") == [running.id]
    assert ids(state="active") == [running.id, queued.id]
    assert ids(state="final") == [done.id]
    assert ids(org="acme") == [running.id]
    assert ids(tag="news") == [running.id, queued.id]
    assert ids(tag="daily", state="final") == [done.id]
    assert ids(tag="new") == []
    assert client.get("/api/v1/crawls", params={"state": "sleeping"}).status_code == 422
    assert client.get("/api/v1/crawls", params={"limit": 0}).json() == {
        "code": "invalid", "message": "limit: Input should be greater than or equal to 1"}


def test_cursor_pages_walk_every_crawl_once_newest_first_even_with_equal_times(api_db, client, make_crawl):
    same = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    crawls = [make_crawl() for _ in range(7)]
    Crawl.objects.filter(pk__in=[c.pk for c in crawls[2:5]]).update(created_at=same)
    expected = list(Crawl.objects.order_by("-created_at", "-id").values_list("id", flat=True))
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/crawls", params=params).json()
        seen += [c["id"] for c in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == expected and pages == 3
    bad = client.get("/api/v1/crawls", params={"cursor": "bm90LWEtY3Vyc29y"})
    assert bad.status_code == 422 and "is not one this API gave out" in bad.json()["message"]


def test_a_crawl_reads_with_its_live_progress_and_files(api_db, client, make_crawl):
    crawl = make_crawl(S.RUNNING, pages_found=40, pages_done=12, pages_failed=1, size_bytes=3_100_000,
                       intent="pause", started_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.id}/a.wacz", size=10, sha256="0" * 64)
    out = client.get(f"/api/v1/crawls/{crawl.id[:6]}").json()
    assert out["id"] == crawl.id and out["status"] == "running" and out["intent"] == "pause"
    assert (out["pages_found"], out["pages_done"], out["pages_failed"]) == (40, 12, 1)
    assert out["size_bytes"] == 3_100_000
    (file,) = out["files"]
    assert file["download_url"] == f"/api/v1/files/{file['id']}/download"
    assert client.get("/api/v1/crawls/0123abcd").json() == {
        "code": "not_found", "message": "no crawl with id '0123abcd'"}
    assert client.get("/api/v1/crawls/zz").status_code == 404


def test_an_ambiguous_id_prefix_is_422_with_the_clis_sentence(api_db, client, make_crawl):
    from crawls.models import Org

    for suffix in ("1", "2"):
        Crawl.objects.create(id="abcd" + suffix * 28, org=Org.objects.get(slug="default"),
                             seeds=["https://example.com/"], config={"seeds": ["https://example.com/"]})
    response = client.get("/api/v1/crawls/abcd")
    assert response.status_code == 422
    assert response.json()["message"] == "crawl id 'abcd' is ambiguous: give more characters"
    assert client.get("/api/v1/crawls/abcd1").json()["id"] == "abcd" + "1" * 28


@pytest.mark.parametrize(("action", "before", "after", "message"), [
    ("pause", S.QUEUED, (S.PAUSED, ""), "paused {short}"),
    ("pause", S.RUNNING, (S.RUNNING, "pause"), "pause requested; the runner will pause {short}"),
    ("resume", S.PAUSED, (S.QUEUED, ""), "resumed {short}: queued"),
    ("stop", S.QUEUED, (S.CANCELED, ""), "canceled {short}: it had not started, so there is nothing to keep"),
    ("stop", S.RUNNING, (S.RUNNING, "stop"), "stop requested; the runner will stop {short} and keep its archive"),
    ("cancel", S.RUNNING, (S.RUNNING, "cancel"), "cancel requested; the runner will cancel {short}"),
    ("retry", S.FAILED, (S.QUEUED, ""), "queued {short} again (attempt 2)"),
])
def test_each_action_goes_through_the_model_and_says_what_the_cli_says(
        api_db, client, make_crawl, action, before, after, message):
    started = {"started_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)} if before == S.RUNNING else {}
    crawl = make_crawl(before, **started)
    response = client.post(f"/api/v1/crawls/{crawl.id}/{action}")
    assert response.status_code == 200, response.text
    assert response.json()["message"] == message.format(short=crawl.short_id)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == after
    assert response.json()["crawl"]["status"] == after[0]


def test_a_refused_action_is_409_with_the_sentence_the_cli_prints(api_server, api_db, client, make_crawl):
    crawl = make_crawl(S.COMPLETE)
    response = client.post(f"/api/v1/crawls/{crawl.id}/resume")
    assert response.status_code == 409
    assert response.json() == {"code": "not_allowed",
                               "message": f"cannot resume crawl {crawl.short_id}: it is complete"}
    cli = subprocess.run([sys.executable, "manage.py", "resume", crawl.id], cwd=ROOT, env=api_server.env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 1
    assert cli.stderr.strip() == f"CommandError: {response.json()['message']}"
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE


def test_retry_of_failed_pages_queues_only_those(api_db, client, make_crawl):
    crawl = make_crawl(S.COMPLETE, pages_failed=2)
    for n, status in enumerate((SnapshotStatus.DONE, SnapshotStatus.FAILED, SnapshotStatus.FAILED)):
        Snapshot.objects.create(crawl=crawl, url=f"https://example.com/{n}", status=status)
    response = client.post(f"/api/v1/crawls/{crawl.id}/retry", params={"failed_pages": "true"})
    assert response.status_code == 200, response.text
    assert response.json()["message"] == f"queued {crawl.short_id} again for its 2 failed page(s) (attempt 2)"
    crawl.refresh_from_db()
    assert crawl.config_override["seeds"] == ["https://example.com/1", "https://example.com/2"]
    again = client.post(f"/api/v1/crawls/{crawl.id}/retry", params={"failed_pages": "true"})
    assert again.status_code == 409


def test_scale_and_exclusions_change_an_active_crawl(api_db, client, make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    response = client.post(f"/api/v1/crawls/{crawl.id}/scale", json={"scale": 3})
    assert response.json()["message"] == f"crawl {crawl.short_id}: scale 1 → 3"
    assert client.post(f"/api/v1/crawls/{crawl.id}/scale", json={"scale": 9}).json() == {
        "code": "invalid", "message": "scale must be from 1 to 8, not 9"}
    added = client.post(f"/api/v1/crawls/{crawl.id}/exclusions", json={"regex": r"\.pdf$"})
    assert added.json()["message"] == rf"crawl {crawl.short_id} excludes '\\.pdf$' (sent to its running instances)"
    twice = client.post(f"/api/v1/crawls/{crawl.id}/exclusions", json={"regex": r"\.pdf$"})
    assert twice.status_code == 409
    bad = client.post(f"/api/v1/crawls/{crawl.id}/exclusions", json={"regex": "("})
    assert bad.status_code == 422 and "is not a valid regular expression" in bad.json()["message"]
    removed = client.delete(f"/api/v1/crawls/{crawl.id}/exclusions", params={"regex": r"\.pdf$"})
    assert removed.status_code == 200
    crawl.refresh_from_db()
    assert crawl.scale == 3 and crawl.config["exclude"] == []
    assert [m.payload["type"] for m in crawl.messages.order_by("id")] == ["addExclusion", "removeExclusion"]
    done = make_crawl(S.COMPLETE)
    refused = client.post(f"/api/v1/crawls/{done.id}/scale", json={"scale": 2})
    assert refused.status_code == 409 and refused.json()["message"] == f"cannot scale crawl {done.short_id}: it is complete"


def test_delete_refuses_an_active_crawl_and_removes_a_finished_one_with_its_files(
        api_server, api_db, client, make_crawl):
    from crawls.models import Org

    active = make_crawl(S.PAUSED)
    refused = client.delete(f"/api/v1/crawls/{active.id}")
    assert refused.status_code == 409
    assert refused.json()["message"] == f"cannot delete crawl {active.short_id}: it is paused"

    crawl = make_crawl(S.COMPLETE)
    folder = api_server.data_dir / "archives" / crawl.id
    folder.mkdir(parents=True)
    (folder / "a.wacz").write_bytes(b"x" * 100)
    work = api_server.data_dir / "crawls" / crawl.id
    work.mkdir(parents=True)
    (work / "state.json").write_text("{}")
    CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.id}/a.wacz", size=100, sha256="0" * 64)
    Org.objects.filter(slug="default").update(bytes_stored=150)
    response = client.delete(f"/api/v1/crawls/{crawl.id}")
    assert response.status_code == 200
    assert response.json() == {"message": f"deleted crawl {crawl.short_id}"}
    assert not Crawl.objects.filter(pk=crawl.pk).exists()
    assert not folder.exists() and not work.exists()
    assert Org.objects.get(slug="default").bytes_stored == 50
    assert Crawl.objects.filter(pk=active.pk).exists()


def test_pages_filter_failed_ones_and_page_by_cursor(api_db, client, make_crawl):
    crawl = make_crawl(S.COMPLETE)
    for n in range(5):
        Snapshot.objects.create(crawl=crawl, url=f"https://example.com/{n}",
                                status=SnapshotStatus.FAILED if n % 2 else SnapshotStatus.DONE)
    first = client.get(f"/api/v1/crawls/{crawl.id}/pages", params={"limit": 2}).json()
    second = client.get(f"/api/v1/crawls/{crawl.id}/pages",
                        params={"limit": 2, "cursor": first["next_cursor"]}).json()
    third = client.get(f"/api/v1/crawls/{crawl.id}/pages",
                       params={"limit": 2, "cursor": second["next_cursor"]}).json()
    urls = [p["url"] for page in (first, second, third) for p in page["items"]]
    assert urls == [f"https://example.com/{n}" for n in range(5)] and third["next_cursor"] is None
    failed = client.get(f"/api/v1/crawls/{crawl.id}/pages", params={"failed": "true"}).json()
    assert [p["url"] for p in failed["items"]] == ["https://example.com/1", "https://example.com/3"]


def test_logs_are_read_oldest_first(api_db, client, make_crawl):
    crawl = make_crawl(S.FAILED)
    for n in range(3):
        CrawlLog.objects.create(crawl=crawl, level="error", source="crawler-0", message=f"line {n}")
    out = client.get(f"/api/v1/crawls/{crawl.id}/logs", params={"limit": 2}).json()
    assert [line["message"] for line in out["items"]] == ["line 0", "line 1"]
    rest = client.get(f"/api/v1/crawls/{crawl.id}/logs", params={"cursor": out["next_cursor"]}).json()
    assert [line["message"] for line in rest["items"]] == ["line 2"]
