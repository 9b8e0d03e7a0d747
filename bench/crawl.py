"""Benchmark: archiver-crawler against wget on a generated local site.

    .venv/bin/python bench/crawl.py [--pages 2000] [--workers 4] [--repeat 1] [--json]

Serves tests.sitegen's generated site (127.0.0.1 only), crawls it with
`archiver-crawler --workers N` (private redis-server on a free port) and with
`wget --recursive --level=inf --no-parent --warc-file=...`, and prints wall time, peak RSS
and pages of each, the speed ratio and whether our WACZ validates. With --json the last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sitegen import free_port, serve_site  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def start_redis(workdir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
         "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Run `cmd`; wall seconds, exit code and the child's own peak RSS (from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:  # Ctrl-C included: leave no crawler behind
        proc.kill()
        proc.wait()
        raise
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"seconds": round(wall, 3), "exit_code": proc.returncode,
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "stderr_tail": stderr[-500:]}


def median_run(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["seconds"])
    result = dict(ordered[len(ordered) // 2])
    result["all_seconds"] = [r["seconds"] for r in runs]
    return result


def crawl_ours(url: str, workdir: Path, redis_port: int, workers: int, crawl_id: str) -> dict:
    cmd = [str(VENV_BIN / "archiver-crawler"), "--url", url, "--workers", str(workers),
           "--redisStoreUrl", f"redis://127.0.0.1:{redis_port}/0", "--crawlId", crawl_id,
           "--collection", "bench", "--cwd", str(workdir), "--generateWACZ",
           "--pageLoadTimeout", "30", "--diskUtilization", "0"]
    env = dict(os.environ, CRAWLER_HOSTNAME="bench-0")
    result = timed(cmd, env)
    collection = workdir / "collections" / "bench"
    pages = collection / "pages" / "pages.jsonl"
    result["pages"] = max(0, len(pages.read_text().splitlines()) - 1) if pages.exists() else 0
    wacz = collection / "bench.wacz"
    result["wacz_valid"] = validate(wacz) if wacz.exists() else False
    return result


def validate(wacz: Path) -> bool | None:
    tool = VENV_BIN / "wacz"
    if not tool.exists():
        return None
    done = subprocess.run([str(tool), "validate", "-f", str(wacz)], capture_output=True,
                          text=True)
    return done.returncode == 0


def crawl_wget(url: str, workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = ["/usr/bin/wget", "--recursive", "--level=inf", "--no-parent",
           f"--warc-file={workdir / 'wget'}", "-q", "-P", str(workdir / "files"), url]
    result = timed(cmd)
    result["pages"] = sum(1 for p in (workdir / "files").rglob("*.html")) + \
        sum(1 for p in (workdir / "files").rglob("index.html*") if not p.name.endswith(".html"))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1,
                        help="run both N times, alternating which goes first; report medians")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    runs: dict[str, list[dict]] = {"ours": [], "wget": []}
    with tempfile.TemporaryDirectory(prefix="crawl-bench-") as tmp:
        tmp_path = Path(tmp)
        redis_proc, redis_port = start_redis(tmp_path)
        try:
            with serve_site(pages=args.pages) as site:
                for i in range(args.repeat):
                    order = ("ours", "wget") if i % 2 == 0 else ("wget", "ours")
                    for name in order:
                        workdir = tmp_path / f"{name}-{i}"
                        if name == "ours":
                            runs[name].append(crawl_ours(site.url, workdir, redis_port,
                                                         args.workers, f"bench{i}"))
                        else:
                            runs[name].append(crawl_wget(site.url, workdir))
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
    ours, wget = median_run(runs["ours"]), median_run(runs["wget"])

    ratio = round(wget["seconds"] / ours["seconds"], 2) if ours["seconds"] else None
    summary = {"site_pages": args.pages + 1, "workers": args.workers, "repeat": args.repeat,
               "load_average_1m": round(os.getloadavg()[0], 2),
               "ours": ours,
               "wget": wget, "speedup_vs_wget": ratio}
    print(f"site: {args.pages + 1} pages on 127.0.0.1; load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs (wget is CPU-bound: other load slows it most)")
    for name, r in (("archiver-crawler", ours), ("wget", wget)):
        print(f"{name:>17}: {r['seconds']:7.2f} s (median of {r['all_seconds']})  cpu {r['cpu_seconds']:6.2f} s  peak RSS {r['peak_rss_mb']:6.1f} MB  "
              f"pages {r['pages']}  exit {r['exit_code']}")
    print(f"speed-up vs wget: {ratio}x   our WACZ valid: {ours['wacz_valid']}")
    if args.json:
        for r in (ours, wget):
            r.pop("stderr_tail", None)
        print(json.dumps(summary))
    return 0 if ours["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
