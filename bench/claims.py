"""How fast the lease queue hands out crawls, and whether any crawl is ever handed out twice.

    .venv/bin/python bench/claims.py [--database-url URL] [--processes N] [--rows 100000]
                                     [--batch K] [--json]

Creates ROWS due crawls in a throw-away database (SQLite in a temp data dir, or a fresh
PostgreSQL database next to the one URL names, dropped afterwards), then, at batch 1 and
at batch K, lets 1 and then N processes claim until the queue is empty. Each run starts
from the same queue (every crawl due again, token 0). A double claim is a crawl won more
than once in one run; a missed crawl is one nobody won. Both must be 0.
With --json the last line of output is one JSON object (see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import claimers  # noqa: E402 - the repository root must be importable first
from tests.pg import fresh_database  # noqa: E402

DEFAULT_BATCH = 16


@dataclass
class Result:
    processes: int
    batch: int
    claims: int
    seconds: float
    claims_per_s: float
    double_claims: int
    missed: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="postgres://... (a fresh database is created next to it); default SQLite")
    parser.add_argument("--processes", type=int, default=4, help="claimers of the concurrent run (default 4)")
    parser.add_argument("--rows", type=int, default=100_000, help="due crawls to claim (default 100000)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                        help=f"rows per claim statement, measured besides batch 1 (default {DEFAULT_BATCH})")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = parser.parse_args(argv)
    if args.processes < 1 or args.rows < 1 or args.batch < 1:
        parser.error("--processes, --rows and --batch must be at least 1")
    if args.database_url and not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error("--database-url must be a postgres:// URL (SQLite is the default)")
    return args


@contextlib.contextmanager
def bench_database(database_url: str | None) -> Iterator[tuple[str, dict[str, str]]]:
    """(backend name, child environment) of a migrated, empty database that is gone afterwards."""
    with tempfile.TemporaryDirectory(prefix="archiver-bench-") as tmp:
        if database_url is None:
            env = claimers.child_env(f"sqlite:///{tmp}/archiver.sqlite3", Path(tmp))
            claimers.migrate(env)
            yield "sqlite", env
            return
        with fresh_database(database_url) as url:
            env = claimers.child_env(url, Path(tmp))
            claimers.migrate(env)
            yield "postgresql", env


def measure(env: dict[str, str], rows: set[str], processes: int, batch: int) -> Result:
    claimers.run_module(env, "requeue")
    report = claimers.run_claimers(env, processes, batch)
    return Result(
        processes=processes, batch=batch, claims=len(report.claims), seconds=report.seconds,
        claims_per_s=report.claims_per_second, double_claims=report.double_claims(),
        missed=len(rows - report.claimed_pks()),
    )


def table(backend: str, rows: int, results: list[Result]) -> str:
    lines = [
        f"{backend}: {rows} due crawls, claims until the queue is empty",
        f"{'processes':>9} {'batch':>5} {'claims':>8} {'seconds':>8} {'claims/s':>9} {'double':>6} {'missed':>6}",
    ]
    lines += [
        f"{r.processes:>9} {r.batch:>5} {r.claims:>8} {r.seconds:>8.2f} {r.claims_per_s:>9.0f} "
        f"{r.double_claims:>6} {r.missed:>6}"
        for r in results
    ]
    return "\n".join(lines)


def summary(backend: str, rows: int, processes: int, batch: int, results: list[Result]) -> dict:
    def at(p: int, b: int) -> Result:
        return next(r for r in results if r.processes == p and r.batch == b)

    main = at(processes, batch)
    return {
        "backend": backend,
        "processes": processes,
        "claims_per_s": round(main.claims_per_s),
        "double_claims": sum(r.double_claims for r in results),
        "missed": sum(r.missed for r in results),
        "batch": batch,
        "single_process_claims_per_s": round(at(1, batch).claims_per_s),
        "batch_1_claims_per_s": round(at(processes, 1).claims_per_s),
        "batch_1_single_process_claims_per_s": round(at(1, 1).claims_per_s),
        "rows": rows,
        "seconds": round(main.seconds, 3),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = sys.stdout
    with bench_database(args.database_url) as (backend, env):
        out.write(f"seeding {args.rows} crawls ({backend}) ...\n")
        out.flush()
        rows = claimers.seed(env, args.rows)
        results = []
        for batch in sorted({1, args.batch}):
            for processes in sorted({1, args.processes}):
                results.append(measure(env, rows, processes, batch))
                out.write(f"  {processes} process(es), batch {batch}: {results[-1].claims_per_s:.0f} claims/s\n")
                out.flush()
    out.write(table(backend, args.rows, results) + "\n")
    report = summary(backend, args.rows, args.processes, args.batch, results)
    if args.json:
        out.write(json.dumps(report) + "\n")
    return 1 if report["double_claims"] or report["missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
