"""`archiver retry ID [--failed-pages]`: queue a crawl again."""

from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = ("Queue a failed or canceled crawl again, as a new attempt; or, with --failed-pages, "
            "crawl only the pages a finished crawl failed on, into the same archive.")
    action = "retry"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--failed-pages", action="store_true",
                            help="retry only the failed pages of a finished crawl")

    def act(self, crawl, now, options) -> None:
        if options["failed_pages"]:
            self.pages = crawl.retry_failed_pages(now)
        else:
            self.pages = None
            crawl.retry(now)

    def outcome(self, crawl) -> str:
        if self.pages is not None:
            return f"queued {crawl.short_id} again for its {self.pages} failed page(s) (attempt {crawl.attempts})"
        return f"queued {crawl.short_id} again (attempt {crawl.attempts})"
