"""ARCHIVER_STORAGE_URL as a local folder other than the data dir (another disk, a NAS
mount): kept archives go there through <data dir>/archives, a link the runner makes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from archiver.conf import from_environ
from archiver.errors import ConfigError
from crawls import storage
from tests.installation import ROOT, Installation
from tests.runner.helpers import wacz_pages
from tests.sitegen import serve_site

FINAL = ("complete", "failed", "canceled", "stopped_by_user")


@pytest.fixture
def folders():
    """(data dir, storage folder), short (the wake socket's path must fit)."""
    top = Path(tempfile.mkdtemp(prefix="alf-", dir="/tmp"))
    yield top / "data", top / "disk2" / "archives"
    shutil.rmtree(top, ignore_errors=True)


def settings_for(data_dir: Path, url: str):
    return from_environ({"ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_STORAGE_URL": url})


def test_a_local_folder_or_file_url_names_where_archives_go(folders):
    data_dir, target = folders
    for url in (str(target), f"file://{target}", f"{target}/"):
        settings = settings_for(data_dir, url)
        assert settings.local_storage == target and settings.s3 is None
    assert settings_for(data_dir, str(data_dir)).local_storage is None  # the default
    assert settings_for(data_dir, str(data_dir / "archives")).local_storage is None


@pytest.mark.parametrize("url, message", [
    ("{data}/crawls", "is inside the data dir"),
    ("{top}", "holds the data dir"),
    ("file://relative/path", "needs an absolute path"),
    ("ftp://host/x", "must be s3://bucket[/prefix], a local folder, or unset"),
])
def test_a_folder_that_cannot_hold_archives_is_refused_by_name(folders, url, message):
    data_dir, _ = folders
    with pytest.raises(ConfigError) as refused:
        settings_for(data_dir, url.format(data=data_dir, top=data_dir.parent))
    assert "ARCHIVER_STORAGE_URL" in str(refused.value) and message in str(refused.value)


def test_the_data_dirs_archives_become_a_link_to_the_folder_once(folders):
    data_dir, target = folders
    settings = settings_for(data_dir, str(target))
    (data_dir / "archives").mkdir(parents=True)  # empty: replaced by the link

    assert storage.link_local_archives(settings) == target
    assert storage.link_local_archives(settings) == target  # again: nothing to do
    assert (data_dir / "archives").is_symlink() and (data_dir / "archives").resolve() == target
    assert target.stat().st_mode & 0o777 == 0o700
    assert storage.link_local_archives(settings_for(data_dir, str(data_dir))) is None


def test_archives_already_in_the_data_dir_or_a_link_elsewhere_are_left_as_they_are(folders):
    data_dir, target = folders
    kept = data_dir / "archives" / "c1" / "c1-0-1.wacz"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"kept")
    with pytest.raises(ConfigError, match="holds archives: move them"):
        storage.link_local_archives(settings_for(data_dir, str(target)))
    assert kept.read_bytes() == b"kept" and not (data_dir / "archives").is_symlink()
    assert not target.exists()  # a refused start leaves nothing behind

    shutil.rmtree(data_dir / "archives")
    os.symlink(data_dir.parent / "elsewhere", data_dir / "archives")
    with pytest.raises(ConfigError, match="links to"):
        storage.link_local_archives(settings_for(data_dir, str(target)))
    assert os.readlink(data_dir / "archives") == str(data_dir.parent / "elsewhere")


@pytest.mark.slow
def test_a_crawl_keeps_its_archive_in_the_folder_and_delete_removes_it_there(folders):
    data_dir, target = folders
    inst = Installation(data_dir)
    inst.env["ARCHIVER_STORAGE_URL"] = str(target)
    inst.env["ARCHIVER_CRAWL_ALLOW_NETWORKS"] = "127.0.0.1/32"
    try:
        inst.migrate()
        with serve_site(pages=3) as site:
            inst.start_daemon()
            crawl_id = inst.manage("add", site.url).strip()
            state = inst.wait(crawl_id, lambda c: c["status"] in FINAL, timeout=90)
        assert state["status"] == "complete", state
        rows = inst.query("SELECT path, size, sha256 FROM crawls_crawlfile WHERE crawl_id = ?", crawl_id)
        assert rows
        for path, size, digest in rows:
            assert path.startswith(f"archives/{crawl_id}/")
            stored = target / path.removeprefix("archives/")  # a real file on the other disk
            assert stored.is_file() and not stored.is_symlink()
            data = stored.read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest)
        assert any(wacz_pages(target / p.removeprefix("archives/")) for p, *_ in rows)
        assert not any(p.is_file() and not p.is_symlink() for p in (data_dir / "archives").rglob("*")
                       if not (data_dir / "archives").is_symlink())
        shown = inst.manage("files", crawl_id)
        assert rows[0][0].rsplit("/", 1)[1] in shown

        inst.manage("delete", crawl_id)
        assert not any((target / crawl_id).glob("*")), (list((target / crawl_id).glob("*")), rows)
    finally:
        inst.clean_up()


def test_the_daemon_refuses_to_start_over_archives_it_would_hide(folders):
    data_dir, target = folders
    (data_dir / "archives" / "c1").mkdir(parents=True)
    (data_dir / "archives" / "c1" / "c1-0-1.wacz").write_bytes(b"kept")
    env = {**os.environ, "ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_STORAGE_URL": str(target)}
    for name in ("ARCHIVER_REDIS_URL", "ARCHIVER_DATABASE_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=120)
    started = subprocess.run([sys.executable, "manage.py", "run", "--once"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode != 0
    assert "holds archives: move them" in started.stderr and "Traceback" not in started.stderr
    assert (data_dir / "archives" / "c1" / "c1-0-1.wacz").read_bytes() == b"kept"


@pytest.mark.django_db
@pytest.mark.usefixtures("admin_settings")
def test_the_admin_and_the_api_serve_an_archive_kept_in_the_folder(folders, admin_client, monkeypatch):
    """Found by trying it as a user: the download answered 404, because the file's path
    leads through the archives/ link, out of the data dir."""
    from archiver import conf
    from crawls.admin.views import download_url
    from crawls.api.routes_files import open_archive
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, CrawlFile, Org

    data_dir, target = folders
    monkeypatch.setenv("ARCHIVER_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ARCHIVER_STORAGE_URL", str(target))
    conf.get.cache_clear()
    try:
        storage.link_local_archives(conf.get())
        crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0],
                             CrawlConfig(seeds=["http://127.0.0.1:9/"]))
        body = bytes(range(256)) * 40
        (target / crawl.pk).mkdir()
        (target / crawl.pk / "s1.wacz").write_bytes(body)
        row = CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.pk}/s1.wacz", root=str(data_dir),
                                       size=len(body), sha256=hashlib.sha256(body).hexdigest())
        whole = admin_client.get(download_url(row))
        assert whole.status_code == 200, whole
        assert b"".join(whole.streaming_content) == body
        part = admin_client.get(download_url(row), headers={"Range": "bytes=10-19"})
        assert part.status_code == 206 and b"".join(part.streaming_content) == body[10:20]
        fd = open_archive(row)
        try:
            assert os.pread(fd, 10, 0) == body[:10]
        finally:
            os.close(fd)
        # Still refused: a link planted inside the folder, leading elsewhere.
        os.symlink("/etc/passwd", target / crawl.pk / "s2.wacz")
        planted = CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.pk}/s2.wacz",
                                           root=str(data_dir), size=10, sha256="0" * 64)
        assert admin_client.get(download_url(planted)).status_code == 404
    finally:
        monkeypatch.undo()
        conf.get.cache_clear()
