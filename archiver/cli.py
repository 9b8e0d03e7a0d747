"""The `archiver` console script: the same commands as `python manage.py`."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"archiver: configuration error: {exc}\n")
        sys.exit(2)
