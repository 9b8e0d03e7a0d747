"""`archiver resume ID`: continue a paused crawl."""

from crawls.cli import TransitionCommand
from crawls.models import CrawlStatus


class Command(TransitionCommand):
    help = "Resume a paused crawl, or withdraw a pause the runner has not carried out yet."
    action = "resume"

    def outcome(self, crawl) -> str:
        if crawl.status == CrawlStatus.QUEUED:
            return f"resumed {crawl.short_id}: queued"
        return f"pause request withdrawn; {crawl.short_id} keeps running"
