"""`archiver cancel ID`: end a crawl at once, discarding partial files."""

from crawls.cli import TransitionCommand
from crawls.models import CrawlStatus


class Command(TransitionCommand):
    help = "Cancel a crawl: its crawlers are removed and partial files discarded."
    action = "cancel"

    def outcome(self, crawl) -> str:
        if crawl.status == CrawlStatus.CANCELED:
            return f"canceled {crawl.short_id}"
        return f"cancel requested; the runner will cancel {crawl.short_id}"
