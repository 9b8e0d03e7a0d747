"""`archiver pull`: fetch the configured crawler image (ARCHIVER_CRAWLER_IMAGE) with progress.

It lives in runner/ because it talks to the engine. The daemon never pulls (a pull inside
its loop would hold every crawl up); this is where an image comes from instead. archiver's
own image is built locally by scripts/build-crawler-image.sh and is never pulled.
"""

from __future__ import annotations

import io
import os
import sys

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

from archiver import conf
from archiver.errors import ArchiverError
from runner.images import PullFailed, is_own_image, pull


class Command(BaseCommand):
    help = ("Fetch the crawler image ARCHIVER_CRAWLER_IMAGE names onto the Docker engine, with "
            "progress. archiver's own image (archiver/crawler:*) is built by "
            "scripts/build-crawler-image.sh instead.")

    def handle(self, *args, **options):
        try:
            settings = conf.get()
        except ArchiverError as exc:
            raise CommandError(str(exc)) from None
        image = settings.crawler_image
        if is_own_image(image):
            raise CommandError(f"{image} is archiver's own crawler, built on this machine and never "
                               f"pulled: run scripts/build-crawler-image.sh")
        tty = self.stdout.isatty()
        console = Console(file=sys.stdout if tty else io.StringIO(), force_terminal=tty,
                          color_system="auto" if tty and "NO_COLOR" not in os.environ else None)
        try:
            with LayerProgress(console) as progress:
                pull(settings, image, progress.show)
        except PullFailed as exc:
            raise CommandError(str(exc)) from None
        finally:
            if not tty and console.file.getvalue().strip():
                self.stdout.write(console.file.getvalue(), ending="")
        self.stdout.write(f"{image} is on the Docker engine; `archiver doctor` checks it.")

# A layer's intermediate steps: its bar shows them; the log keeps its outcome only.
LAYER_STEPS = {"Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete",
               "Extracting"}


class LayerProgress(Progress):
    """One bar per layer being downloaded or extracted; other events as plain lines."""

    def __init__(self, console: Console):
        super().__init__(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                         console=console, transient=True)
        self.layers: dict[str, int] = {}

    def show(self, event: dict) -> None:
        layer, status = event.get("id", ""), event.get("status", "")
        detail = event.get("progressDetail") or {}
        if layer and detail.get("total"):
            if layer not in self.layers:
                self.layers[layer] = self.add_task(layer, total=detail["total"])
            self.update(self.layers[layer], description=f"{layer} {status}",
                        completed=detail.get("current", 0), total=detail["total"])
        elif status not in LAYER_STEPS:
            if layer in self.layers:  # done: its outcome line replaces its bar
                self.remove_task(self.layers.pop(layer))
            self.console.print(f"{layer}: {status}" if layer else status, highlight=False)
