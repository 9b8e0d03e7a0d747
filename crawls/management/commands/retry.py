"""`archiver retry ID`: queue a failed or canceled crawl again."""

from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = "Queue a failed or canceled crawl again, as a new attempt."
    action = "retry"

    def outcome(self, crawl) -> str:
        return f"queued {crawl.short_id} again (attempt {crawl.attempts})"
