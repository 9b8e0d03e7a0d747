"""`archiver qa CRAWL [--limit N] [--json]`: replay every page of a kept crawl from its
archives in Chromium, compare it with its capture and store the scores (runner/qa.py);
prints the crawl's summary and its worst pages first."""

from __future__ import annotations

import os

from django.core.management.base import CommandError
from rich.table import Table

from archiver import conf
from crawls import diffing
from crawls.cli import ArchiverCommand, int_arg
from crawls.lease import db_now
from crawls.models import Crawl, PageReview, ReviewStatus, review_summary
from runner import qa, qa_queue

shown = diffing.shown_score


class Command(ArchiverCommand):
    help = "Quality review: replay a kept crawl's pages from its archives and score them against their capture."

    def add_arguments(self, parser):
        parser.add_argument("crawl", metavar="CRAWL", help="a crawl id or a prefix")
        parser.add_argument("--limit", type=int_arg, metavar="N", help="review only the first N pages")
        parser.add_argument("--workers", type=int_arg, default=2, metavar="N",
                            help="pages replayed at once (default 2)")
        parser.add_argument("--json", action="store_true", help="print the summary and every page as JSON")

    def run(self, *, crawl, limit, workers, json, **options):
        crawl = Crawl.objects.by_prefix(crawl)
        settings = conf.get()
        try:  # refused with nothing changed: not kept yet, no archive, no Chromium
            diffing.check_kept(crawl)
            if settings.chromium_path("local") is None:
                raise qa.NoBrowser("no Chromium to replay in (install the chromium package, or set "
                                   "ARCHIVER_CHROMIUM to its path)")
        except (diffing.DiffRefused, qa.ReviewRefused) as exc:
            raise CommandError(f"qa {crawl.short_id}: {exc}") from None
        # Through the crawl's review row, as the runner's: a review the runner holds now is
        # not run twice, and a failed or skipped automatic review is retried here.
        now = db_now()
        taken = qa_queue.take(crawl, f"cli-{os.getpid()}", now, settings.lease_seconds)
        if taken is None:
            raise CommandError(f"qa {crawl.short_id}: a runner is reviewing it now")
        row, token = taken
        try:
            row = qa_queue.run_claimed(settings, row.pk, token, now, limit=limit,
                                       workers=max(1, min(workers, 8)), mark=False)
        except qa.ReviewInterrupted as exc:
            raise CommandError(f"qa {crawl.short_id}: interrupted ({exc})") from None
        if row.status != ReviewStatus.DONE:
            raise CommandError(f"qa {crawl.short_id}: {row.status}: {row.error}")
        summary = review_summary(crawl)
        rows = list(PageReview.objects.filter(crawl=crawl).order_by("score", "id"))
        if json:
            self.write_json({"crawl": crawl.pk, **{k: v for k, v in summary.items() if k != "reviewed_at"},
                             "pages": [page_dict(row) for row in rows]})
            return
        self.stdout.write(summary_line(crawl.short_id, summary))
        self.render(review_table(rows[:20]))


def summary_line(short_id: str, summary: dict) -> str:
    """Scores rounded down, as `status` and the admin show them (diffing.shown_score)."""
    return (f"crawl {short_id}: {summary['pages']} page(s) reviewed, mean score "
            f"{shown(summary['mean'] or 0)}, worst {shown(summary['worst'] or 0)}, "
            f"{summary['below']} below 0.80")


def page_dict(row: PageReview) -> dict:
    return {"url": row.url, "score": row.score, "text": row.text_score, "resources": row.resources_score,
            "screenshot": row.screenshot_score, "resources_total": row.resources_total,
            "resources_missing": row.resources_missing, "error": row.error}


def review_table(rows: list[PageReview]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("SCORE", "TEXT", "RES", "SHOT", "MISSING", "URL"):
        table.add_column(column, overflow="fold", no_wrap=column != "URL")
    for row in rows:
        table.add_row(shown(row.score), shown(row.text_score), shown(row.resources_score),
                      shown(row.screenshot_score), str(len(row.resources_missing)), row.error or row.url)
    return table
