"""A handful of mutants the suite must kill (issue 38: the suite was made faster, and every
assertion must still stand). Each mutant changes one line of the code, runs the tests that
guard it, and is put back whatever happens; a mutant whose tests still pass survived.

    .venv/bin/python bench/mutants.py          # every mutant; prints one line each, then JSON
    .venv/bin/python bench/mutants.py quota    # the mutants whose name contains "quota"

Run it on a clean tree (it refuses a file with uncommitted changes, which it would restore
to the committed text otherwise).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant("org room off by one", "crawls/quotas.py",
           "max(limit - running, 0)", "max(limit - running + 1, 0)",
           ("tests/lifecycle/test_admission.py",)),
    Mutant("relaunch backoff doubled once more", "runner/decide.py",
           "RELAUNCH_BASE * 2 ** (failures - 1)", "RELAUNCH_BASE * 2 ** failures",
           ("tests/runner/test_decisions.py", "tests/runner/test_steps.py")),
    Mutant("a page below FULL_PAGE_LOADED counted archived", "crawls/models/pages.py",
           "return not (type(state) is int and state < PAGE_LOADED)", "return True",
           ("tests/runner/test_crawler_rules.py",)),
    Mutant("due includes rows due a second later", "crawls/lease.py",
           "return self.filter(retry_at__lte=now)",
           "return self.filter(retry_at__lte=now + dt.timedelta(seconds=1))",
           ("tests/test_lease.py", "tests/lifecycle/test_lease.py")),
    Mutant("host names checked without IDNA", "crawls/rules.py",
           'ascii_name = name.encode("idna").decode("ascii").lower()',
           "ascii_name = name.lower()",
           ("tests/test_crawl_address_policy.py",)),
    Mutant("a password's last '@' not masked", "archiver/options/text.py",
           'r"^([^:/]*:?//)[^/]*@"', 'r"^([^:/]*:?//)[^@/]*@"',
           ("tests/test_kept_settings.py",)),
    Mutant("'none' allowed beside other screenshots", "crawls/config.py",
           "NO_SCREENSHOT in kinds and len(kinds) > 1", "NO_SCREENSHOT in kinds and len(kinds) > 2",
           ("tests/test_browser_options.py",)),
)


def dirty(path: Path) -> bool:
    result = subprocess.run(["git", "diff", "--quiet", "--", str(path)], cwd=ROOT, check=False)
    return result.returncode != 0


def run(mutant: Mutant) -> dict:
    path = ROOT / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        return {"mutant": mutant.name, "result": "not applied (the line changed: update bench/mutants.py)"}
    if dirty(path):
        return {"mutant": mutant.name, "result": f"skipped ({mutant.path} has uncommitted changes)"}
    tests = [t for t in mutant.tests if (ROOT / t).exists()]
    started = time.monotonic()
    try:
        path.write_text(text.replace(mutant.old, mutant.new))
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0", *tests],
            cwd=ROOT, capture_output=True, text=True, check=False)
    finally:
        path.write_text(text)
    killed = result.returncode == 1
    outcome = "killed" if killed else ("survived" if result.returncode == 0 else f"error (pytest exit {result.returncode})")
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")][:1]
    return {"mutant": mutant.name, "result": outcome, "tests": tests,
            "by": failed[0].removeprefix("FAILED ").split(" - ")[0] if failed else "",
            "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or any(word in m.name for word in argv)]
    results = []
    for mutant in chosen:
        outcome = run(mutant)
        results.append(outcome)
        print(f"{outcome['result']:>9}  {mutant.name}  {outcome.get('by', '')}", flush=True)
    killed = sum(r["result"] == "killed" for r in results)
    print(json.dumps({"mutants": len(results), "killed": killed, "results": results}))
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
