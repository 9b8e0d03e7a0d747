"""`archiver resume ID`: continue a paused crawl."""

from crawls.cli import TransitionCommand


class Command(TransitionCommand):
    help = "Resume a paused crawl, or withdraw a pause the runner has not carried out yet."
    action = "resume"
