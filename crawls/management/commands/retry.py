"""`archiver retry ID [--failed-pages]`: queue a crawl again."""

from crawls import actions
from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = ("Queue a failed or canceled crawl again, as a new attempt; or, with --failed-pages, "
            "crawl only the pages a finished crawl failed on, into the same archive.")
    action = "retry"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--failed-pages", action="store_true",
                            help="retry only the failed pages of a finished crawl")

    def act(self, crawl, options):
        if options["failed_pages"]:
            return actions.retry_failed_pages(crawl)
        return actions.retry(crawl)
