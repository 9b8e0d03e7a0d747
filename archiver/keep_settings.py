"""`python -m archiver.keep_settings`: scripts/start.sh keeps the ARCHIVER_* variables it was
given in the data dir's archiver.env (archiver/options/kept.py), for every process, and
prints one line saying where and which. A bad value is refused before anything is written."""

from __future__ import annotations

import sys

from archiver import conf
from archiver.errors import ConfigError


def main() -> None:
    try:
        path, names = conf.keep()
    except ConfigError as exc:
        sys.stderr.write(f"archiver: configuration error: {exc}\n")
        sys.exit(2)
    which = ", ".join(names) if names else "none given"
    sys.stdout.write(f"settings kept in {path} for every archiver command ({which}); "
                     "`archiver doctor` says where each comes from\n")


if __name__ == "__main__":
    main()
