"""`archiver stop ID`: end a crawl gracefully, keeping what it archived."""

from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = "Stop a crawl gracefully: the crawlers finish their pages and its archive is kept."
    action = "stop"
