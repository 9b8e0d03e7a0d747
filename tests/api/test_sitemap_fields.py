"""`sitemap`, `sitemap_since` and `seed_file` through the API: POST /crawls and POST /schedules
carry them (as `archiver add --sitemap --sitemap-since --seed-file URL`), refused in the CLI's
words when wrong."""

from __future__ import annotations

from crawls.models import Crawl, Schedule


def test_sitemap_and_seed_file_fields_are_carried_by_crawls_and_schedules(api_db, client):
    body = {"seeds": ["https://example.com/"], "sitemap": "https://example.com/sitemap.xml",
            "sitemap_since": "2026-05-01T10:00:00Z"}
    created = client.post("/api/v1/crawls", json=body)
    assert created.status_code == 201, created.text
    assert Crawl.objects.get().config["sitemap_since"] == "2026-05-01T10:00:00Z"
    assert created.json()["config"]["sitemap"] == "https://example.com/sitemap.xml"
    bad = client.post("/api/v1/crawls", json={**body, "sitemap_since": "soon"})
    assert bad.status_code == 422 and "sitemap_since" in bad.json()["message"]
    schedule = client.post("/api/v1/schedules", json={"cron": "0 3 * * *", "seeds": ["https://example.com/"],
                                                      "sitemap": "auto", "sitemap_since": "last"})
    assert schedule.status_code == 201, schedule.text
    assert Schedule.objects.get().config["sitemap_since"] == "last"

    # A seed file URL, judged by the address policy as seeds are (one test: one server set-up).
    body = {"seeds": ["https://example.com/"], "seed_file": "https://example.com/seeds.txt"}
    created = client.post("/api/v1/crawls", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["config"]["seed_file"] == "https://example.com/seeds.txt"
    refused = client.post("/api/v1/crawls", json={**body, "seed_file": "http://169.254.169.254/s.txt"})
    assert refused.status_code == 422 and "169.254.169.254" in refused.json()["message"]
