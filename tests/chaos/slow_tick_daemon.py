"""`python -m tests.chaos.slow_tick_daemon SECONDS MARKER`: `archiver run --daemon --no-live`
with one more periodic step that stands for slow work in the tick (packaging, ingest,
keeping archives): while the runner holds a running crawl, it takes SECONDS (or until the
daemon is stopped) and then appends a line to MARKER. For tests/chaos/test_slow_tick.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    seconds, marker = float(sys.argv[1]), Path(sys.argv[2])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from crawls.models import Crawl, CrawlStatus
    from runner.daemon import Runner

    built = Runner.__init__

    def with_slow_step(self, *args, **kwargs):
        built(self, *args, **kwargs)

        def slow(now) -> bool:
            if Crawl.objects.filter(pk__in=list(self.held), status=CrawlStatus.RUNNING).exists():
                self.stop_event.wait(seconds)
                with marker.open("a") as out:
                    out.write("slow tick\n")
            return False

        self.steps.append(("slow work", slow))

    Runner.__init__ = with_slow_step
    call_command("run", "--daemon", "--no-live")


if __name__ == "__main__":
    main()
