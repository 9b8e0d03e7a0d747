"""`archiver cancel ID`: end a crawl at once, discarding partial files."""

from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = "Cancel a crawl: its crawlers are removed and partial files discarded."
    action = "cancel"
