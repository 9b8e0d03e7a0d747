"""`qa` through the API: POST /crawls and POST /schedules carry it in the crawl config (as
`archiver add --qa` and `schedule add --qa`), and a crawl shows its review's status."""

from __future__ import annotations

from crawls.models import Crawl, QualityReview, ReviewStatus, Schedule


def test_qa_is_carried_by_crawls_and_schedules_and_the_review_is_shown(api_db, client):
    created = client.post("/api/v1/crawls", json={"seeds": ["https://example.com/"], "qa": True})
    assert created.status_code == 201, created.text
    crawl = Crawl.objects.get()
    assert crawl.config["qa"] is True and created.json()["quality_review"] is None
    plain = client.post("/api/v1/crawls", json={"seeds": ["https://example.org/"]}).json()
    assert "qa" not in plain["config"]
    bad = client.post("/api/v1/crawls", json={"seeds": ["https://example.com/"], "qa": "maybe"})
    assert bad.status_code == 422 and "qa" in bad.json()["message"]

    QualityReview.objects.create(crawl=crawl, created_at=crawl.created_at, status=ReviewStatus.SKIPPED,
                                 error="no Chromium to replay in")
    shown = client.get(f"/api/v1/crawls/{crawl.pk}").json()["quality_review"]
    assert (shown["status"], shown["error"], shown["pages"]) == ("skipped", "no Chromium to replay in", 0)

    schedule = client.post("/api/v1/schedules", json={"cron": "0 3 * * *", "seeds": ["https://example.com/"],
                                                      "qa": True})
    assert schedule.status_code == 201, schedule.text
    assert Schedule.objects.get().config["qa"] is True
