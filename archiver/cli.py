"""The `archiver` console script: `archiver <command>` runs any management command (the
same as `python manage.py <command>`) with archiver's settings; `archiver --version`."""

from __future__ import annotations

import os
import platform
import sys


def versions() -> str:
    """archiver's, its crawler's, Django's and Python's versions, one per line."""
    import archiver_crawler
    import django

    import archiver

    return "\n".join([
        f"archiver {archiver.__version__}",
        f"archiver-crawler {archiver_crawler.__version__}",
        f"Django {django.get_version()}",
        f"Python {platform.python_version()} ({sys.executable})",
    ])


def main() -> None:
    # `archiver --version` alone; after a command (`archiver add --version`) it stays
    # Django's option, as every management command has it.
    if sys.argv[1:] in (["--version"], ["-V"]):
        sys.stdout.write(versions() + "\n")
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"archiver: configuration error: {exc}\n")
        sys.exit(2)
