"""Benchmark: archiver-crawler against wget on a generated local site, and its browser mode
against its HTTP mode on a generated JS-heavy site.

    .venv/bin/python bench/crawl.py [--pages 2000] [--workers 4] [--instances 1] [--processes N]
                                    [--repeat 3] [--latency 0,0.02] [--js-pages 40] [--json]

Serves tests.sitegen's generated site (127.0.0.1 only) once per `--latency` value (seconds
added to every response, as a remote server's round trip would), and crawls it `--repeat`
times with `archiver-crawler --workers N` (private redis-server on a free port; with
`--instances N`, N instances of one crawl sharing its queue, as `add --scale N` runs; with
`--processes N`, each instance in N processes, else the crawler's default) and with
`wget --recursive --level=inf --no-parent --warc-file=...`, alternating which goes first.
For each scenario it prints the median wall time of each tool (and every run's), median CPU
seconds, the highest peak RSS, pages, the speed-up (wget median / ours) and whether every
WACZ of ours validates.

Then (`--js-pages N`, 0 to skip) it serves tests.jssite's site of N+1 pages (every link drawn
by script, half of them from fetched JSON; an image and a gzipped stylesheet per page) and
crawls it once with `--browser` and once in HTTP mode, printing pages found, wall seconds
per page, and the peak memory of the whole process tree (the crawler and its Chromium),
sampled from /proc every 0.2 s as PSS (shared pages counted once) and as the RSS sum.
With --json the last line is one JSON object.

The crawler run is the console script beside this Python (`.venv/bin/archiver-crawler`);
`PYTHONPATH=<tree>/crawler` makes it (and its processes) run another tree's crawler code.
CPU seconds include an instance's child processes (they are waited for); peak RSS is the
largest single process's.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.jssite import js_site  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.sitegen import serve_site  # noqa: E402

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


def tree(pid: int) -> list[int]:
    """`pid` and its live descendants, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += parents.get(current, [])
    return found


def tree_memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS sum) in bytes of `pid`'s process tree."""
    pss = rss = 0
    for member in tree(pid):
        try:
            for line in Path(f"/proc/{member}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return pss, rss


def timed_tree(cmd: list[str], env: dict | None = None) -> dict:
    """Run `cmd`; wall seconds, exit code and the peak PSS/RSS of its whole process tree."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_pss = peak_rss = 0
    try:
        while proc.poll() is None:
            pss, rss = tree_memory(proc.pid)
            peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr.close()
    return {"seconds": round(wall, 3), "exit_code": proc.returncode,
            "peak_pss_mb": round(peak_pss / 2**20, 1), "peak_rss_sum_mb": round(peak_rss / 2**20, 1),
            "stderr_tail": stderr[-500:]}


def js_scenario(args, redis_port: int, tmp_path: Path) -> dict:
    """The JS site crawled in browser mode and in HTTP mode, one instance, --workers N."""
    out = {}
    with serve_site(extra=js_site(args.js_pages)) as site:
        for name, extra in (("browser", ["--browser"]), ("http", [])):
            workdir = tmp_path / f"js-{name}"
            cmd = [str(VENV_BIN / "archiver-crawler"), "--url", site.root + "/js/",
                   "--workers", str(args.workers), "--redisStoreUrl",
                   f"redis://127.0.0.1:{redis_port}/0", "--crawlId", f"js-{name}",
                   "--collection", "bench", "--cwd", str(workdir), "--generateWACZ",
                   "--pageLoadTimeout", "30", "--diskUtilization", "0",
                   "--allowNetworks", "127.0.0.1/32", *extra]
            result = timed_tree(cmd, dict(os.environ, CRAWLER_HOSTNAME="bench-0"))
            pages = workdir / "collections" / "bench" / "pages" / "pages.jsonl"
            result["pages"] = max(0, len(pages.read_text().splitlines()) - 1) \
                if pages.exists() else 0
            result["s_per_page"] = round(result["seconds"] / max(1, result["pages"]), 3)
            wacz = workdir / "collections" / "bench" / "bench.wacz"
            result["wacz_valid"] = validate(wacz) if wacz.exists() else False
            out[name] = result
            shutil.rmtree(workdir, ignore_errors=True)
    b, h = out["browser"], out["http"]
    return {"site_pages": args.js_pages + 1, "browser": b, "http": h,
            "pages_ratio": round(b["pages"] / max(1, h["pages"]), 2),
            "s_per_page_ratio": round(b["s_per_page"] / max(0.001, h["s_per_page"]), 2),
            "pss_ratio": round(b["peak_pss_mb"] / max(0.1, h["peak_pss_mb"]), 2),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def report_js(scenario: dict, workers: int) -> None:
    print(f"\nJS site of {scenario['site_pages']} pages on 127.0.0.1, {workers} workers; "
          f"load average {scenario['load_average_1m']:.2f} on {os.cpu_count()} CPUs")
    for name in ("browser", "http"):
        r = scenario[name]
        print(f"{name:>8} mode: pages {r['pages']:4d}  {r['seconds']:7.2f} s  "
              f"{r['s_per_page']:6.3f} s/page  peak PSS {r['peak_pss_mb']:7.1f} MB  "
              f"(RSS sum {r['peak_rss_sum_mb']:7.1f} MB)  exit {r['exit_code']}  "
              f"WACZ valid {r['wacz_valid']}")
    print(f"browser/http: pages {scenario['pages_ratio']}x  s/page "
          f"{scenario['s_per_page_ratio']}x  peak PSS {scenario['pss_ratio']}x")


def summarize(runs: list[dict]) -> dict:
    """Medians of wall and CPU time, the highest peak RSS, and what every run produced."""
    summary = {
        "seconds": round(statistics.median(r["seconds"] for r in runs), 3),
        "all_seconds": [r["seconds"] for r in runs],
        "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in runs), 3),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "pages": sorted({r["pages"] for r in runs}),
        "exit_codes": sorted({r["exit_code"] for r in runs}),
    }
    if "wacz_valid" in runs[0]:
        summary["wacz_valid"] = all(r["wacz_valid"] for r in runs)
    return summary


def crawl_ours(url: str, workdir: Path, redis_port: int, workers: int, crawl_id: str,
               instances: int = 1, processes: int | None = None) -> dict:
    """`instances` crawler processes of one crawl (as the runner's --scale launches them),
    sharing its Redis queue, each with its own folder: wall time until the last exits, CPU
    and pages summed over all, and every instance's WACZ validated."""
    procs, start = [], time.perf_counter()
    for k in range(instances):
        folder = workdir / f"instance-{k}"
        cmd = [str(VENV_BIN / "archiver-crawler"), "--url", url, "--workers", str(workers),
               "--redisStoreUrl", f"redis://127.0.0.1:{redis_port}/0", "--crawlId", crawl_id,
               "--collection", "bench", "--cwd", str(folder), "--generateWACZ",
               "--pageLoadTimeout", "30", "--diskUtilization", "0",
               "--allowNetworks", "127.0.0.1/32",  # the site is local: open it to the policy
               *(["--processes", str(processes)] if processes else [])]
        procs.append(subprocess.Popen(cmd, env=dict(os.environ, CRAWLER_HOSTNAME=f"bench-{k}"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    cpu = peak = 0.0
    codes = []
    try:
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            codes.append(proc.returncode)
            cpu += usage.ru_utime + usage.ru_stime
            peak = max(peak, usage.ru_maxrss / 1024)
    except BaseException:  # Ctrl-C included: leave no crawler behind
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
        raise
    result = {"seconds": round(time.perf_counter() - start, 3), "exit_code": max(codes, key=abs),
              "cpu_seconds": round(cpu, 3), "peak_rss_mb": round(peak, 1), "pages": 0, "wacz_valid": True}
    for k in range(instances):
        collection = workdir / f"instance-{k}" / "collections" / "bench"
        pages = collection / "pages" / "pages.jsonl"
        result["pages"] += max(0, len(pages.read_text().splitlines()) - 1) if pages.exists() else 0
        wacz = collection / "bench.wacz"
        result["wacz_valid"] = result["wacz_valid"] and (validate(wacz) if wacz.exists() else False)
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


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serve_dir(directory: Path, start: str):
    """`directory` served by the standard library's file server on 127.0.0.1 (as
    `python3 -m http.server --bind 127.0.0.1` would), crawled from `start`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(_Quiet, directory=str(directory)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield type("DirSite", (), {"url": f"http://127.0.0.1:{server.server_address[1]}/{start}"})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_scenario(latency: float, args, redis_port: int, tmp_path: Path) -> dict:
    runs: dict[str, list[dict]] = {"ours": [], "wget": []}
    serving = serve_dir(Path(args.site), args.start) if args.site else \
        serve_site(pages=args.pages, latency=latency)
    with serving as site:
        for i in range(args.repeat):
            order = ("ours", "wget") if i % 2 == 0 else ("wget", "ours")
            for name in order:
                workdir = tmp_path / f"{name}-{latency}-{i}"
                if name == "ours":
                    runs[name].append(crawl_ours(site.url, workdir, redis_port, args.workers,
                                                 f"bench-{latency}-{i}", args.instances,
                                                 args.processes))
                else:
                    runs[name].append(crawl_wget(site.url, workdir))
                shutil.rmtree(workdir, ignore_errors=True)
    ours, wget = summarize(runs["ours"]), summarize(runs["wget"])
    return {"latency_s": latency, "ours": ours, "wget": wget,
            "speedup_vs_wget": round(wget["seconds"] / ours["seconds"], 2),
            "wall_ratio_vs_wget": round(ours["seconds"] / wget["seconds"], 2),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def report(scenario: dict, site: str) -> None:
    print(f"\n{site} on 127.0.0.1, {scenario['latency_s'] * 1000:g} ms per response; "
          f"load average {scenario['load_average_1m']:.2f} on {os.cpu_count()} CPUs")
    for name, r in (("archiver-crawler", scenario["ours"]), ("wget", scenario["wget"])):
        runs = ", ".join(f"{s:.2f}" for s in r["all_seconds"])
        print(f"{name:>17}: {r['seconds']:7.2f} s median ({runs})  cpu {r['cpu_seconds']:6.2f} s"
              f"  peak RSS {r['peak_rss_mb']:6.1f} MB  pages {r['pages']}  exit {r['exit_codes']}")
    ours = scenario["ours"]
    print(f"archiver-crawler CPU per page: "
          f"{1000 * ours['cpu_seconds'] / max(1, max(ours['pages'])):.2f} ms; "
          f"wall time / wget's: {scenario['wall_ratio_vs_wget']}")
    print(f"speed-up vs wget: {scenario['speedup_vs_wget']}x   "
          f"every WACZ of ours valid: {scenario['ours']['wacz_valid']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--instances", type=int, default=1,
                        help="crawler processes of one crawl sharing its queue (the runner's --scale)")
    parser.add_argument("--processes", type=int, default=None,
                        help="processes per instance (the crawler's --processes; default: "
                             "the crawler's own, one per available CPU up to --workers)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each tool per scenario, alternating which goes first")
    parser.add_argument("--latency", default="0,0.02",
                        help="comma-separated seconds added to every response, one scenario each")
    parser.add_argument("--js-pages", type=int, default=40,
                        help="pages of the JS site for browser mode against HTTP mode (0: skip)")
    parser.add_argument("--site", metavar="DIR",
                        help="crawl this directory, served by http.server (e.g. "
                             "/usr/share/doc/python3/html from Debian's python3-doc), instead "
                             "of the generated site; no added latency, no JS scenario")
    parser.add_argument("--start", default="index.html", help="--site's page to start from")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    latencies = [float(v) for v in args.latency.split(",") if v.strip()]
    if args.site:
        latencies, args.js_pages = [0.0], 0

    scenarios = []
    with tempfile.TemporaryDirectory(prefix="crawl-bench-") as tmp:
        redis_proc, redis_port = start_redis(Path(tmp))
        try:
            for latency in latencies:
                scenarios.append(run_scenario(latency, args, redis_port, Path(tmp)))
                report(scenarios[-1], args.site or f"{args.pages + 1} pages")
            js = js_scenario(args, redis_port, Path(tmp)) if args.js_pages else None
            if js:
                report_js(js, args.workers)
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
    if args.json:
        print(json.dumps({"site_pages": args.pages + 1, "workers": args.workers,
                          "repeat": args.repeat, "cpus": os.cpu_count(),
                          "scenarios": scenarios, "js": js}))
    ok = all(s["ours"]["exit_codes"] == [0] and s["ours"]["wacz_valid"] is not False
             for s in scenarios)
    ok = ok and (js is None or js["browser"]["exit_code"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
