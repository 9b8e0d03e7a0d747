"""OS processes that claim the same due crawls at once (concurrency tests, bench/claims.py).

`run_claimers(env, processes, batch)` starts N Python processes running this module.
Each sets up Django against the database named in `env`, says "ready", waits for one
shared "go", claims due crawls `batch` at a time until a claim comes back empty, and
reports every (pk, token) it won with its start and end times (`time.monotonic` is one
clock for all processes on Linux, so the parent can compute the wall time of the run).

The same module seeds the database: `python -m tests.claimers seed ROWS` creates ROWS
due crawls and prints their ids; `requeue` makes every crawl due again with token 0.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEASE_SECONDS = 3600  # longer than any run: a row claimed twice is a double claim, never a re-lease


@dataclass
class ClaimerRun:
    owner: str
    started: float
    finished: float
    claims: list[tuple[str, int]]


@dataclass
class ClaimReport:
    runs: list[ClaimerRun]

    @property
    def claims(self) -> list[tuple[str, int]]:
        return [claim for run in self.runs for claim in run.claims]

    @property
    def seconds(self) -> float:
        return max(r.finished for r in self.runs) - min(r.started for r in self.runs)

    @property
    def claims_per_second(self) -> float:
        return len(self.claims) / self.seconds if self.seconds > 0 else 0.0

    def double_claims(self) -> int:
        """Claims beyond the first of the same row (0 when every row was won once)."""
        return sum(n - 1 for n in Counter(pk for pk, _ in self.claims).values() if n > 1)

    def claimed_pks(self) -> set[str]:
        return {pk for pk, _ in self.claims}


# --- the parent side --------------------------------------------------------------------


def child_env(database_url: str, data_dir: Path) -> dict[str, str]:
    """The environment that points a child process at one database and nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARCHIVER_")}
    env.update(
        ARCHIVER_DATABASE_URL=database_url,
        ARCHIVER_DATA_DIR=str(data_dir),
        ARCHIVER_SECRET_KEY="claimers-not-secret",
        DJANGO_SETTINGS_MODULE="archiver.settings",
        PYTHONPATH=str(ROOT),
    )
    return env


def run_module(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    """Run `python -m tests.claimers ARGS` (or manage.py when args[0] ends in .py)."""
    command = [sys.executable, *args] if args[0].endswith(".py") else [sys.executable, "-m", "tests.claimers", *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def migrate(env: dict[str, str]) -> None:
    run_module(env, "manage.py", "migrate", "--verbosity", "0")


def seed(env: dict[str, str], rows: int) -> set[str]:
    return set(json.loads(run_module(env, "seed", str(rows))))


def run_claimers(env: dict[str, str], processes: int, batch: int, timeout: float = 600) -> ClaimReport:
    """Start `processes` claimers, release them together, collect what each one won."""
    children = []
    try:
        for n in range(processes):
            children.append(subprocess.Popen(
                [sys.executable, "-m", "tests.claimers", "claim", f"claimer-{n}", str(batch)],
                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
            ))
        for child in children:
            if child.stdout.readline().strip() != "ready":
                child.wait(timeout=30)
                raise RuntimeError(f"a claimer did not start:\n{child.stderr.read()[-4000:]}")
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        runs = []
        for child in children:
            out, err = child.communicate(timeout=timeout)
            if child.returncode != 0:
                raise RuntimeError(f"a claimer failed ({child.returncode}):\n{err[-4000:]}")
            result = json.loads(out)
            runs.append(ClaimerRun(result["owner"], result["started"], result["finished"],
                                   [tuple(c) for c in result["claims"]]))
        return ClaimReport(runs)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)


# --- the child side ---------------------------------------------------------------------


def seed_rows(rows: int, now: dt.datetime | None = None) -> list[str]:
    """Create `rows` due crawls, oldest first, and return their ids (Django must be set up)."""
    from django.db import connection

    from crawls.models import Crawl, CrawlStatus, Org

    now = now or dt.datetime.now(dt.UTC)
    org = Org.objects.get(slug="default")
    crawls = [
        Crawl(org=org, seeds=[f"https://example.com/{i}"], config={"seeds": [f"https://example.com/{i}"]},
              status=CrawlStatus.QUEUED, retry_at=now - dt.timedelta(milliseconds=rows - i),
              created_at=now - dt.timedelta(milliseconds=rows - i))
        for i in range(rows)
    ]
    Crawl.objects.bulk_create(crawls, batch_size=2000)
    analyze(connection)
    return [c.id for c in crawls]


def requeue_all() -> int:
    """Make every crawl due again as if never claimed (token 0), in its original order."""
    from django.db import connection
    from django.db.models import F

    from crawls.models import Crawl

    count = Crawl.objects.update(retry_at=F("created_at"), lease_owner="", lease_token=0)
    analyze(connection)
    return count


def analyze(connection) -> None:
    """Fresh planner statistics, and on PostgreSQL no dead rows left from seeding."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE crawls_crawl")
        else:
            cursor.execute("ANALYZE")


def claim_until_empty(owner: str, batch: int) -> list[tuple[str, int]]:
    from crawls.lease import db_now
    from crawls.models import Crawl

    won = []
    while claims := Crawl.objects.claim(owner, db_now(), LEASE_SECONDS, limit=batch):
        won.extend((c.pk, c.token) for c in claims)
    return won


def _claim_command(owner: str, batch: int) -> None:
    from django.db import connection

    connection.ensure_connection()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    started = time.monotonic()
    claims = claim_until_empty(owner, batch)
    finished = time.monotonic()
    json.dump({"owner": owner, "started": started, "finished": finished, "claims": claims}, sys.stdout)


def main(argv: list[str]) -> None:
    import django

    django.setup()
    command, *args = argv
    if command == "seed":
        json.dump(seed_rows(int(args[0])), sys.stdout)
    elif command == "requeue":
        sys.stdout.write(f"{requeue_all()}\n")
    elif command == "claim":
        _claim_command(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
