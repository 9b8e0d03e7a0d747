"""`archiver pause ID`: pause a crawl, keeping its queue for resume."""

from crawls.cli import TransitionCommand
from crawls.models import CrawlStatus


class Command(TransitionCommand):
    help = "Pause a crawl. A running crawl is paused by the runner; its queue is kept."
    action = "pause"

    def outcome(self, crawl) -> str:
        if crawl.status == CrawlStatus.PAUSED:
            return f"paused {crawl.short_id}"
        return f"pause requested; the runner will pause {crawl.short_id}"
