"""The data dir's disk fills up while the crawler packages its WACZ (a small tmpfs)."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.chaos.harness import FINAL, RedisServer, Trial, chaos_site, wacz_members

pytestmark = pytest.mark.slow

# About 7 MB of WARCs on a 12 MB disk: under the 90 % threshold while crawling, too much
# to package (the WACZ copies them), so the disk fills during packaging.
DISK = "12m"
PAGES = 95
BODY_BYTES = 100_000


def can_mount_tmpfs(tmp: Path) -> bool:
    probe = tmp / "probe"
    probe.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                          capture_output=True)
    if done.returncode == 0:
        subprocess.run(["umount", str(probe)], capture_output=True)
    probe.rmdir()
    return done.returncode == 0


def warcs_under(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("*.warc*") if p.name.endswith((".warc", ".warc.gz"))}


class FileWatch:
    """Every WARC and WACZ that appears under a data dir, and every CrawlFile row recorded,
    sampled every 0.1 s, so the end state can be compared with everything that existed."""

    def __init__(self, trial: Trial, folder: Path):
        self.trial, self.folder = trial, folder
        self.warcs: set[str] = set()
        self.recorded: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FileWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.1)

    def sample(self) -> None:
        with contextlib.suppress(OSError):  # a folder removed while walking it
            self.warcs |= warcs_under(self.folder)
        self.recorded |= {path for (path,) in self.trial.db.query("SELECT path FROM crawls_crawlfile")}

    def lost(self) -> tuple[set[str], set[str]]:
        """(recorded files gone, WARCs neither on disk nor inside a kept WACZ)."""
        self.sample()
        gone = {path for path in self.recorded if self.trial.resolve(path) is None}
        on_disk = warcs_under(self.folder)
        kept = set()
        for path in self.recorded - gone:
            found = self.trial.resolve(path)
            if found.name.endswith((".warc.gz", ".warc")):
                # A WARC the crawler left unpackaged, kept as it was: `<crawl>-<instance>-<process>-<name>`.
                kept.add(found.name.split("-", 3)[3])
            else:
                kept |= {Path(name).name for name in wacz_members(found)}
        return gone, self.warcs - on_disk - kept


def test_a_disk_filling_while_packaging_deletes_nothing_and_the_crawl_resumes(chaos_root):
    if not can_mount_tmpfs(chaos_root):
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    redis = RedisServer.start(chaos_root / "redis")  # its files off the small disk
    try:
        with chaos_site(trees=1, pages=PAGES, fanout=10, body_bytes=BODY_BYTES) as site, \
                Trial(chaos_root, redis=redis, webhooks=False) as trial:
            disk = chaos_root / "d0"
            trial.mount_tmpfs(disk, DISK)
            data_dir = trial.add_data_dir(disk)
            trial.migrate()  # the database is one SQLite file off the small disk
            trial.start_daemon(data_dir)
            trial.daemon_ready(data_dir)
            crawl_id = trial.add(data_dir, site.tree_url(0))
            with FileWatch(trial, disk) as watch:
                ended = trial.wait_crawl(crawl_id, lambda c: c["status"] in (*FINAL, "paused"),
                                         timeout=60)
                if ended["status"] == "paused":
                    trial.resize_tmpfs(disk, "200m")
                    # The runner resumes a crawl it paused for the disk once there is room;
                    # a person may also resume it (whoever is first).
                    with contextlib.suppress(AssertionError):
                        trial.wait_crawl(crawl_id, lambda c: c["status"] != "paused", timeout=15)
                    if trial.crawl(crawl_id)["status"] == "paused":
                        trial.manage(data_dir, "resume", crawl_id)
                    trial.wait_final([crawl_id], timeout=40)
                else:
                    time.sleep(2)  # what a failure deletes goes right after the transition
                gone, warcs_lost = watch.lost()
            result = trial.audit(site, [crawl_id])
            final = trial.crawl(crawl_id)
    finally:
        redis.stop()
    assert (gone, warcs_lost) == (set(), set()), "archived data was deleted"
    assert ended["status"] == "paused", ended
    assert "disk" in ended["waiting_reason"].lower(), ended
    assert final["status"] == "complete", final
    assert (result["pages_missing"], result["wacz_invalid"]) == (0, 0), result.get("details", result)
