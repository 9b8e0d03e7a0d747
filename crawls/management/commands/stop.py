"""`archiver stop ID`: end a crawl gracefully, keeping what it archived."""

from crawls.cli import TransitionCommand
from crawls.models import CrawlStatus


class Command(TransitionCommand):
    help = "Stop a crawl gracefully: the crawlers finish their pages and its archive is kept."
    action = "stop"

    def outcome(self, crawl) -> str:
        if crawl.status == CrawlStatus.CANCELED:
            return f"canceled {crawl.short_id}: it had not started, so there is nothing to keep"
        return f"stop requested; the runner will stop {crawl.short_id} and keep its archive"
