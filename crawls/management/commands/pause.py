"""`archiver pause ID`: pause a crawl, keeping its queue for resume."""

from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = "Pause a crawl. A running crawl is paused by the runner; its queue is kept."
    action = "pause"
