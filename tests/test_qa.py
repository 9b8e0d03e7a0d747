"""Quality review (runner/qa.py) with the real crawler and a real Chromium: a browser-mode
crawl of tests/jssite.py (screenshots on), then its pages replayed from the WACZ alone (the
site is down by then) score high; the same archive without the page's script scores lower
on the pages that need it. Screenshot scoring on drawn images."""

from __future__ import annotations

import datetime as dt
import io
import shutil
import zipfile
from pathlib import Path

import pytest
from archiver_crawler.browser import find_chromium
from django.core.management import call_command

from archiver.conf import Settings
from crawls.config import CrawlConfig
from crawls.models import (
    Crawl,
    CrawlStatus,
    Org,
    PageReview,
    QualityReview,
    ReviewStatus,
    review_summary,
)
from runner import qa
from tests.crawler.conftest import spawn  # noqa: F401  (the fixture)
from tests.jssite import js_pages, js_site
from tests.search.waczs import keep
from tests.sitegen import serve_site

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")]
PAGES = 3


def kept_crawl(data_dir: Path, wacz: Path) -> Crawl:
    from crawls.config import CrawlConfig

    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0], CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    crawl.refresh_from_db()
    keep(data_dir, crawl, wacz)
    return crawl


def without(wacz: Path, target: Path, dropped: bytes) -> Path:
    """A copy of the WACZ whose index no longer lists `dropped` (as if never captured)."""
    with zipfile.ZipFile(wacz) as source, zipfile.ZipFile(target, "w") as copy:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.startswith("indexes/") and info.filename.endswith(".cdxj"):
                data = b"\n".join(line for line in data.splitlines() if dropped not in line) + b"\n"
            copy.writestr(info, data)
    return target


@pytest.fixture
def qa_settings(tmp_path, monkeypatch) -> Settings:
    root = tmp_path / "data"
    root.mkdir()
    settings = Settings(data_dir=root, chromium=CHROMIUM)
    monkeypatch.setattr("archiver.conf.get", lambda: settings)
    return settings


@pytest.mark.usefixtures("admin_settings")
def test_a_faithful_replay_scores_high_and_one_missing_its_script_scores_lower(
        spawn, qa_settings, tmp_path, admin_client):  # noqa: F811
    with serve_site(extra=js_site(PAGES)) as site:
        run = spawn(site.root + "/js/", "--browser", "--workers", "2", "--pageLoadTimeout", "20",
                    "--generateWACZ", "--text", "to-pages", "--screenshot", "view")
        assert run.wait(120) == 0, run.stderr
    # The site is gone: what the replay shows can only come from the archive.
    faithful = kept_crawl(qa_settings.data_dir, run.collection.wacz)
    assert qa.review(faithful, qa_settings) == PAGES + 1
    rows = {row.url: row for row in PageReview.objects.filter(crawl=faithful)}
    assert set(rows) == js_pages(site.root, PAGES)
    for row in rows.values():
        assert row.error == "" and row.resources_missing == [], row.__dict__
        assert row.text_score >= 0.95 and row.resources_score == 1.0, row.__dict__
        assert row.screenshot_score >= 0.9, (row.url, shot_likeness(faithful, qa_settings, row))
        assert (qa_settings.data_dir / row.replay_shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert review_summary(faithful)["below"] == 0
    assert_a_failed_review_keeps_the_last_one(faithful, qa_settings)

    damaged = kept_crawl(qa_settings.data_dir, without(run.collection.wacz, tmp_path / "damaged.wacz", b"/js/app.js"))
    out = io.StringIO()
    call_command("qa", damaged.pk[:8], stdout=out)
    assert f"crawl {damaged.short_id}: {PAGES + 1} page(s) reviewed" in out.getvalue()
    for row in PageReview.objects.filter(crawl=damaged):
        before = rows[row.url]
        assert f"{site.root}/js/app.js" in row.resources_missing, row.__dict__
        assert row.resources_score < 1 and row.text_score < before.text_score, row.__dict__
        assert row.score < before.score - 0.05, (row.__dict__, before.__dict__)
    assert PageReview.objects.filter(crawl=faithful).count() == PAGES + 1  # each crawl its own rows

    # The admin: worst first, both screenshots served as PNG that no browser sniffs.
    from django.urls import reverse

    page = admin_client.get(reverse("admin:crawls_crawl_qa", args=[damaged.pk])).content.decode()
    assert f"Quality review of crawl {damaged.short_id}" in page and "below 0.80" in page
    worst = PageReview.objects.filter(crawl=damaged).order_by("score", "id").first()
    # Each review names its page in a title attribute; the bare URL of /js/ is also the start
    # of every other page's.
    def place(url: str) -> int:
        return page.index(f'title="{url}"')

    assert place(worst.url) < min(place(row.url) for row in rows.values() if row.url != worst.url)
    for kind in ("capture", "replay"):
        shot = admin_client.get(reverse("admin:crawls_crawl_qa_shot", args=[damaged.pk, worst.pk, kind]))
        assert shot.status_code == 200 and shot["Content-Type"] == "image/png", kind
        assert shot["X-Content-Type-Options"] == "nosniff" and shot.content.startswith(b"\x89PNG")
    other = PageReview.objects.filter(crawl=faithful).first()
    assert admin_client.get(reverse("admin:crawls_crawl_qa_shot", args=[damaged.pk, other.pk, "replay"])
                            ).status_code == 404  # a review of another crawl
    crawl_page = admin_client.get(reverse("admin:crawls_crawl_change", args=[damaged.pk])).content.decode()
    assert reverse("admin:crawls_crawl_qa", args=[damaged.pk]) in crawl_page

    # Screenshots are private, and go with the crawl.
    folder = qa_settings.data_dir / "qa" / damaged.pk
    assert (folder.parent.stat().st_mode & 0o777, folder.stat().st_mode & 0o777) == (0o700, 0o700)
    from crawls.retention import delete_all_files

    delete_all_files(damaged, qa_settings)
    assert not folder.exists()
    shutil.rmtree(qa_settings.data_dir / "qa", ignore_errors=True)


def shot_likeness(crawl: Crawl, settings: Settings, row: PageReview) -> dict:
    """What a replay screenshot that scored low looks like: its size and its likeness to
    each page's capture screenshot (is it another page's, or a page half drawn?). Said in
    the failure, as it was seen once in CI (0.29) and not again under load."""
    from PIL import Image

    from crawls import kept_wacz

    replay = (settings.data_dir / row.replay_shot).read_bytes()
    seen = {"replay size": Image.open(io.BytesIO(replay)).size}
    with kept_wacz.Archives(settings) as archives:
        _records, views = qa.held_records(archives, crawl)
        for url, view in views.items():
            taken = kept_wacz.warc_block(archives.record(view))
            seen[url] = (Image.open(io.BytesIO(taken)).size, qa.shot_similarity(taken, replay))
    return seen


def assert_a_failed_review_keeps_the_last_one(crawl: Crawl, settings: Settings) -> None:
    """A review that fails after replaying leaves the previous one whole: rows and the
    screenshots they point at; one that succeeds replaces both, the old images gone."""
    before = {row.url: row.replay_shot for row in PageReview.objects.filter(crawl=crawl)}
    folder = settings.data_dir / "qa" / crawl.pk
    assert len(list(folder.iterdir())) == 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(qa, "judge", lambda *args: (_ for _ in ()).throw(RuntimeError("judging broke")))
        with pytest.raises(RuntimeError, match="judging broke"):
            qa.review(crawl, settings)
    assert {row.url: row.replay_shot for row in PageReview.objects.filter(crawl=crawl)} == before
    assert all((settings.data_dir / shot).is_file() for shot in before.values())
    assert len(list(folder.iterdir())) == 1  # the failed review's screenshots went

    assert qa.review(crawl, settings) == len(before)
    after = {row.url: row.replay_shot for row in PageReview.objects.filter(crawl=crawl)}
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert all((settings.data_dir / shot).is_file() for shot in after.values())
    assert not any((settings.data_dir / shot).exists() for shot in before.values())
    assert len(list(folder.iterdir())) == 1


def drawn(lines: int) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (1280, 800), "white")
    draw = ImageDraw.Draw(image)
    for n in range(lines):
        draw.rectangle((40, 40 + n * 60, 900, 70 + n * 60), fill="black")  # a line of "text"
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_a_screenshot_missing_lines_scores_lower_and_a_bad_image_scores_nothing():
    assert qa.shot_similarity(drawn(6), drawn(6)) == 1.0
    assert qa.shot_similarity(drawn(6), drawn(3)) < 0.6
    assert qa.shot_similarity(drawn(6), b"not a png") is None


def test_a_crawl_that_kept_nothing_is_refused_with_its_reason(qa_settings):
    from crawls.config import CrawlConfig

    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0], CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    with pytest.raises(qa.ReviewRefused, match="not kept yet"):
        qa.review(crawl, qa_settings)
    assert not PageReview.objects.exists()


def test_status_shows_a_crawls_quality_review_and_its_worst_pages(conf_data_dir):
    crawl = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=["http://x/"], qa=True))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    now = dt.datetime.now(dt.UTC)
    QualityReview.objects.create(crawl=crawl, status=ReviewStatus.DONE, created_at=now, pages=3)
    for url, score in (("http://x/good", 1.0), ("http://x/broken", 0.41), ("http://x/almost", 0.996)):
        PageReview.objects.create(crawl=crawl, url=url, score=score, text_score=score, reviewed_at=now)
    out = io.StringIO()
    call_command("status", crawl.pk, stdout=out)
    shown = out.getvalue()
    assert "quality review" in shown and "3 (1 below 0.80, 0 not replayed)" in shown
    assert shown.index("http://x/broken") < shown.index("http://x/almost") < shown.index("http://x/good")
    assert " 0.99 " in shown  # 0.996, not shown as 1.00


def test_archiver_qa_rounds_scores_down_as_status_and_the_admin_do():
    from rich.console import Console

    from crawls.diffing import shown_score
    from runner.management.commands.qa import review_table, summary_line

    summary = {"pages": 2, "mean": 0.9189, "worst": 0.2999, "below": 1}
    assert summary_line("8f22c023", summary) == ("crawl 8f22c023: 2 page(s) reviewed, mean score 0.91, "
                                                 "worst 0.29, 1 below 0.80")
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(review_table([PageReview(url="https://e.com/", score=0.9189, text_score=0.999,
                                           resources_score=None, screenshot_score=0.2999)]))
    assert console.file.getvalue().split()[6:10] == ["0.91", "0.99", "-", "0.29"]
    assert shown_score(0.9189) == "0.91"  # status's and the admin's
