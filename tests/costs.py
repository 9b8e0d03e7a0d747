"""Where the suite's time goes, per test file, from a run's JUnit XML.

    python -m tests.costs JUNIT_XML            # the 10 costliest files
    python -m tests.costs JUNIT_XML --write    # also rewrite tests/costly_files.txt

tests/costly_files.txt orders the suite (tests/conftest.py): the costliest files are handed to
pytest-xdist's workers first, so no long chaos trial starts last and runs alone at the end.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = Path(__file__).with_name("costly_files.txt")
KEPT = 40  # files listed; the rest run after them in collection order


def file_of(classname: str) -> str:
    """tests.chaos.test_adoption.TestX -> tests/chaos/test_adoption.py"""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (ROOT / path).is_file():
            return path
    return classname


def file_seconds(junit: Path) -> Counter:
    seconds: Counter = Counter()
    for case in ET.parse(junit).iter("testcase"):
        seconds[file_of(case.get("classname", ""))] += float(case.get("time") or 0)
    return seconds


def listed() -> list[str]:
    if not LIST.is_file():
        return []
    return [line.split()[-1] for line in LIST.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    seconds = file_seconds(Path(argv[0]))
    total = sum(seconds.values())
    print(f"costliest test files (of {total:.0f} s of tests in all):")
    for path, spent in seconds.most_common(10):
        print(f"{spent:8.1f}s  {path}")
    if "--write" in argv:
        lines = [f"{spent:.0f} {path}" for path, spent in seconds.most_common(KEPT)]
        LIST.write_text("# seconds file: written by python -m tests.costs JUNIT --write\n"
                        + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
