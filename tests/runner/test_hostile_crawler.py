"""A compromised local crawler (tests/runner/hostile_crawler.py, run through
ARCHIVER_LOCAL_CRAWLER_COMMAND) against the real runner, a real Redis with a password and
the real local launcher: nothing outside its folder is touched, no other crawl is
affected, no secret is seen."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawls.lease import db_now
from crawls.models import Crawl, CrawlLog, CrawlStatus
from runner.daemon import Runner
from runner.launchers import LocalLauncher
from runner.progress import ProgressStore, crawl_password
from runner.redis_server import RedisEndpoint, answers
from tests.ports import free_port
from tests.runner.helpers import is_final
from tests.waiting import drive, wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
HOSTILE = Path(__file__).with_name("hostile_crawler.py")
S = CrawlStatus


@pytest.fixture
def guarded_redis(tmp_path):
    """A redis-server with an admin password, as the embedded one has."""
    port, password = free_port(), "admin-" + os.urandom(8).hex()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--databases", "16", "--requirepass", password,
         "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = RedisEndpoint(host="127.0.0.1", port=port, password=password, databases=16)
    try:
        wait_for(lambda: answers(endpoint, timeout=1), what="redis-server answering")
    except AssertionError:
        process.kill()
        raise
    yield endpoint
    process.terminate()
    process.wait(timeout=10)


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        digest.update(str(item.relative_to(path)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


def test_a_hostile_local_crawler_touches_nothing_outside_its_folder_and_sees_no_secret(
        settings, make_crawl, guarded_redis, tmp_path, monkeypatch):
    host_file = tmp_path / "host" / "secret.txt"
    host_file.parent.mkdir()
    host_file.write_text("host data the crawler must not change")
    host_folder = tmp_path / "host" / "folder"
    host_folder.mkdir()
    (host_folder / "keep.txt").write_text("keep me")
    before = tree_digest(tmp_path / "host")
    victim_db = 9  # another crawl's database, with its state
    guarded_redis.client(victim_db).set("victim:d", "42")
    victim = make_crawl()
    # Another live runner's crawl: ours must never touch it (nor adopt it).
    Crawl.objects.filter(pk=victim.pk).update(status=S.RUNNING, redis_db=victim_db, lease_owner="other",
                                              retry_at=db_now() + dt.timedelta(hours=1))
    (settings.data_dir / "hostile.json").write_text(json.dumps(
        {"host_file": str(host_file), "host_folder": str(host_folder), "other_db": victim_db}))
    monkeypatch.setenv("ARCHIVER_SECRET_KEY", "django-secret-never-seen")
    monkeypatch.setenv("ARCHIVER_DATABASE_URL", "postgres://user:dbpass@127.0.0.1/never")
    hostile_settings = settings.model_copy(update={"local_crawler_command": (sys.executable, str(HOSTILE))})
    crawl = make_crawl()
    store = ProgressStore(guarded_redis)
    runner = Runner(hostile_settings, LocalLauncher(hostile_settings), store, clock=db_now,
                    host_check=lambda c: None)
    runner.register(db_now())
    try:
        drive(runner, is_final(crawl), timeout=90)
    finally:
        for instance in runner.launcher.list():
            runner.launcher.remove(instance.ref)
        store.close()

    crawl.refresh_from_db()
    instance_dir = settings.data_dir / "crawls" / crawl.pk / "0"
    first = json.loads((instance_dir / "hostile-report-0.json").read_text())
    assert first["redis"]["own_write"] == "allowed"
    refused = {name: result for name, result in first["redis"].items() if name != "own_write"}
    assert all(result.startswith("refused") for result in refused.values()), refused
    leaked = [name for name in first["environ"] if name.startswith(("ARCHIVER_", "DJANGO")) or "DATABASE" in name]
    # The signing key is handed on purpose: the crawler signs the archive it builds (a crawler
    # taken over can sign with it while it runs; docs/security.md says so). Nothing else.
    assert [name for name in leaked if name != "ARCHIVER_SIGNING_KEY"] == []
    crawl_pass = crawl_password(guarded_redis.password, crawl.pk)
    seen = " ".join(first["command_lines"])
    assert guarded_redis.password not in seen and crawl_pass not in seen
    assert tree_digest(tmp_path / "host") == before  # nothing outside its folder changed
    assert guarded_redis.client(victim_db).get("victim:d") == "42"  # the other crawl's state
    assert guarded_redis.client().ping()  # not shut down
    assert (instance_dir / "hostile-report-1.json").exists()  # relaunched after the crash
    warnings = list(CrawlLog.objects.filter(crawl=crawl, level="warning").values_list("message", flat=True))
    assert any("link" in w or "not a regular file" in w for w in warnings), warnings
