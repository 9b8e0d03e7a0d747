"""The bucket away under a running daemon: moto's server behind a TCP proxy that is cut
(connections refused, those open closed) and restored, as a network cut to the bucket is.

    bucket_outage_trial(root, moment="upload")   # cut before the crawler's upload; restored
                                                 # after two of its uploads failed
    bucket_outage_trial(root, moment="record")   # cut after the upload, before the runner
                                                 # recorded it; restored once the crawl waits
    bucket_outage_trial(root, moment="upload", restore=False, grace=8)   # gone for good
    stop_without_bucket_trial(root)              # SIGTERM while the crawl waits for it

Each returns the audit of `Trial.audit()` plus the crawl's row and the lines the daemon
logged about the bucket (docs/runner.md, "The bucket away").
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.chaos.harness import FINAL, SharedBucket, Trial, chaos_site
from tests.chaos.proxy import CuttableProxy
from tests.waiting import wait_for

BUCKET_WAIT = "waiting: bucket unreachable"
BUCKET_WORDS = ("bucket", "upload", "object storage", "code 22")
PAGES = 12  # and the tree's index page


@contextlib.contextmanager
def bucket_behind_proxy(root: Path, grace: float | None = None, pages: int = PAGES,
                        delay: float = 0.3) -> Iterator[tuple]:
    """(site, trial, data_dir, proxy, storage): one daemon keeping its archives in a bucket
    of moto's server reached through a cuttable proxy; migrated, its daemon started."""
    storage = SharedBucket(root / "s3")
    env = {}
    if grace is not None:
        env["ARCHIVER_STORAGE_GRACE"] = str(grace)
    try:
        with CuttableProxy(int(storage.server.url.rsplit(":", 1)[1])) as proxy, \
                chaos_site(trees=1, pages=pages, delay=delay) as site, \
                Trial(root, storage=storage, webhooks=False,
                      env={**env, "ARCHIVER_STORAGE_ENDPOINT": proxy.url}) as trial:
            data_dir = trial.add_data_dir()
            trial.migrate()
            trial.start_daemon(data_dir)
            trial.daemon_ready(data_dir)
            yield site, trial, data_dir, proxy, storage
    finally:
        storage.stop()


def exits(trial: Trial, crawl_id: str, reason: str) -> int:
    return trial.db.query("SELECT count(*) FROM crawls_process WHERE crawl_id = %s AND "
                          "exit_reason = %s", crawl_id, reason)[0][0]


def bucket_lines(trial: Trial) -> int:
    """Lines of the daemons' logs about the bucket or the uploads."""
    return sum(1 for path in trial.logs if path.exists()
               for line in path.read_text(errors="replace").splitlines()
               if any(word in line.lower() for word in BUCKET_WORDS))


def cut_before_upload(trial: Trial, crawl_id: str, proxy: CuttableProxy, restore: bool) -> None:
    """Cut while the crawl runs its last pages, so its crawler's upload fails (exit 22);
    restored once a relaunched crawler's upload failed too."""
    trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= PAGES - 3, timeout=60)
    proxy.cut()
    trial.note("bucket cut")
    if restore:
        wait_for(lambda: exits(trial, crawl_id, "storage") >= 2, 120, 0.2, "two upload failures")
        proxy.restore()
        trial.note("bucket restored")


def cut_before_record(trial: Trial, data_dir, crawl_id: str, proxy: CuttableProxy,
                      storage: SharedBucket, restore: bool) -> None:
    """Cut after the crawler uploaded, before the runner recorded the upload: the daemon is
    held (SIGSTOP) while the crawler finishes, so the cut falls exactly in between."""
    trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= PAGES - 1, timeout=60)
    daemon = data_dir.daemon
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: storage.object_keys(), 60, 0.1, "the crawler's upload")
        proxy.cut()
        trial.note("bucket cut after the upload")
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    if restore:
        trial.wait_crawl(crawl_id, lambda c: c["waiting_reason"] == BUCKET_WAIT
                         or c["status"] in FINAL, timeout=60)
        proxy.restore()
        trial.note("bucket restored")


def bucket_outage_trial(root: Path, *, moment: str = "upload", restore: bool = True,
                        grace: float | None = None, timeout: float = 120) -> dict:
    """One crawl of a slow site keeping its archive in the bucket; the bucket cut at
    `moment` ("upload" or "record") and, with `restore`, restored after."""
    with bucket_behind_proxy(root, grace) as (site, trial, data_dir, proxy, storage):
        crawl_id = trial.add(data_dir, site.tree_url(0))
        if moment == "upload":
            cut_before_upload(trial, crawl_id, proxy, restore)
        else:
            cut_before_record(trial, data_dir, crawl_id, proxy, storage, restore)
        trial.wait_final([crawl_id], timeout)
        # The row is final before the end's clean-up (leftovers kept, the folder removed).
        wait_for(lambda: not (data_dir.path / "crawls" / crawl_id).exists(), 60, 0.1,
                 "the crawl's working folder removed")
        result = trial.audit(site, [crawl_id], require="complete" if restore else "failed")
        result["crawl"] = trial.crawl(crawl_id)
        result["local_files"] = trial.db.query(
            "SELECT count(*) FROM crawls_crawlfile WHERE crawl_id = %s AND root NOT LIKE 's3://%%'",
            crawl_id)[0][0]
        result["objects"] = len(storage.object_keys())
        result["upload_failures"] = exits(trial, crawl_id, "storage")
        result["bucket_lines"] = bucket_lines(trial)
        result["log_tail"] = trial.log_tail(6000)
        return result


def stop_without_bucket_trial(root: Path, signum: int = signal.SIGTERM, timeout: float = 60) -> dict:
    """A crawl whose end waits for the bucket; then the daemon signalled: how long it took
    to exit (docs/runner.md: 10 s)."""
    with bucket_behind_proxy(root) as (site, trial, data_dir, proxy, _storage):
        crawl_id = trial.add(data_dir, site.tree_url(0))
        cut_before_upload(trial, crawl_id, proxy, restore=False)
        trial.wait_crawl(crawl_id, lambda c: c["waiting_reason"] == BUCKET_WAIT, timeout=60)
        daemon = data_dir.daemon
        daemon.send_signal(signum)
        started = time.monotonic()
        try:
            code = daemon.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        return {"exit_code": code, "stop_seconds": round(time.monotonic() - started, 2),
                "tracebacks": trial.tracebacks(), "log": trial.log_tail(100_000),
                "bucket_lines": bucket_lines(trial)}
