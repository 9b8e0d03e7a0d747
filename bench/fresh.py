"""A bench's measuring child on a database and data dir of its own (fresh SQLite, migrated)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_child(script: str, args: list[str], work: Path, drop: tuple[str, ...] = ()) -> dict:
    """`script --child ARGS` run on `work`'s new database, without the variables in `drop`:
    what it printed last, as JSON. The data dir goes afterwards; the database stays in `work`."""
    from tests import claimers

    data_dir = work / "data"
    env = claimers.child_env(f"sqlite:///{work}/bench.sqlite3", data_dir)
    env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'crawler'}"
    for name in drop:
        env.pop(name, None)
    claimers.migrate(env)
    done = subprocess.run([sys.executable, script, "--child", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    shutil.rmtree(data_dir, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])
