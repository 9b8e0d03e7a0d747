"""The Swarm launcher's engine calls against the container launcher's, on one engine.

    DOCKER_HOST=unix:///run/archiver-swarm/docker.sock .venv/bin/python bench/swarm.py [--instances 10]

DOCKER_HOST must name a Swarm manager (a swarm-mode engine runs plain containers too, so both
launchers use the same engine and image, ARCHIVER_CRAWLER_IMAGE). For each launcher, one
instance at a time really crawls a slow site on 127.0.0.1 (a redis-server of its own on a
free port) and is measured: `launch()`; launch until the crawler runs (container: the
container is running; Swarm: the task is `running`, scheduling included); `list()` and
`inspect()` with it running; `remove()` while it crawls (SIGTERM, its exit, the removal).
Prints p50 and max per step and launcher, or one JSON line with --json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from archiver.conf import Settings  # noqa: E402 - the repository root must be importable first
from runner.launchers import DockerLauncher, LaunchSpec, SwarmLauncher  # noqa: E402
from runner.launchers.swarm import newest  # noqa: E402
from runner.redis_server import RedisEndpoint, answers, free_port  # noqa: E402
from tests.sitegen import serve_site  # noqa: E402


def crawler_runs(launcher, ref: str) -> bool:
    api = launcher._api()
    if isinstance(launcher, SwarmLauncher):
        task = newest(api.tasks(filters={"service": ref})) or {}
        return task.get("Status", {}).get("State") == "running"
    return api.inspect_container(ref)["State"]["Status"] == "running"


def measure(launcher, spec_of, instances: int) -> dict[str, list[float]]:
    steps: dict[str, list[float]] = {"launch": [], "until_running": [], "list": [], "inspect": [], "remove": []}
    for i in range(instances):
        started = time.monotonic()
        ref = launcher.launch(spec_of(i)).ref
        steps["launch"].append(time.monotonic() - started)
        while not crawler_runs(launcher, ref):
            if time.monotonic() - started > 60:
                raise SystemExit(f"{launcher.name}: instance {i} did not start: {launcher.log_tail(ref)}")
            time.sleep(0.005)
        steps["until_running"].append(time.monotonic() - started)
        time.sleep(1)  # crawling
        for name, call, arg in (("list", launcher.list, ()), ("inspect", launcher.inspect, (ref,)),
                                ("remove", launcher.remove, (ref,))):
            started = time.monotonic()
            call(*arg)
            steps[name].append(time.monotonic() - started)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="abench-", dir="/tmp"))
    port = free_port()
    redis_proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", str(data_dir)], stdout=subprocess.DEVNULL)
    endpoint = RedisEndpoint(host="127.0.0.1", port=port)
    settings = Settings(data_dir=data_dir, host_rate=0.0)  # a local site: no host budget
    report = {}
    try:
        while not answers(endpoint, 1.0):
            time.sleep(0.05)
        with serve_site(pages=200) as site:
            for path, response in site.routes.items():
                if path.startswith("/gen/") and path.endswith(".html"):
                    response.delay = 0.2  # so each instance is still crawling when removed
            def spec_of(i: int, launcher: str = "") -> LaunchSpec:
                folder = settings.crawls_dir / f"bench{launcher}" / str(i)
                folder.mkdir(parents=True)
                return LaunchSpec(crawl_id=f"bench{launcher}", instance=i, process_id=i + 1, instance_dir=folder,
                                  workers=1, redis=endpoint, db=i + 1, runner_id="bench",
                                  config={"seeds": [site.url], "allowNetworks": ["127.0.0.0/8"]})

            for launcher in (DockerLauncher(settings), SwarmLauncher(settings)):
                steps = measure(launcher, lambda i, name=launcher.name: spec_of(i, name), args.instances)
                report[launcher.name] = {step: {"p50_ms": round(statistics.median(values) * 1000),
                                                "max_ms": round(max(values) * 1000)}
                                         for step, values in steps.items()}
                launcher.close()
    finally:
        redis_proc.terminate()
        redis_proc.wait(timeout=10)
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps({"instances": args.instances, **report}))
        return
    for name, steps in report.items():
        print(f"{name}: " + ", ".join(f"{step} p50 {v['p50_ms']} ms (max {v['max_ms']})" for step, v in steps.items()))


if __name__ == "__main__":
    main()
