"""The crawler image, run the way archiver's DockerLauncher runs it, on the real engine.

The container shares the host network (it reaches Redis and the test site on 127.0.0.1),
finds Redis through an extra hosts entry (the crawler refuses localhost Redis URLs, as the
real one does), runs as uid 1000 with no capabilities, and writes into a bind-mounted
host directory, which therefore has to belong to uid 1000.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import archiver_crawler
import docker.types
import pytest
import redis
import requests
import yaml

from tests.sitegen import serve_site

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CRAWLER_UID = 1000
CRAWL_TIMEOUT = 120


@pytest.fixture
def crawl_dir(tmp_path) -> Path:
    """The host directory mounted on /crawls, writable by the container's user."""
    path = tmp_path / "crawls"
    path.mkdir()
    if os.geteuid() == 0:
        os.chown(path, CRAWLER_UID, CRAWLER_UID)
    elif os.geteuid() != CRAWLER_UID:
        path.chmod(0o777)
    return path


def container_redis_url(host_url: str) -> str:
    """The private test Redis as the container must name it: via the `redis` hosts entry."""
    parts = urlsplit(host_url)
    return f"redis://redis:{parts.port}{parts.path}"


def run_crawler(docker_client, image: str, crawl_id: str, crawl_dir: Path, args: list[str]):
    container = docker_client.containers.run(
        image,
        ["crawl", *args],
        detach=True,
        hostname=f"crawl-{crawl_id}-0",
        environment={"CRAWL_ID": crawl_id},
        network_mode="host",
        extra_hosts={"redis": "127.0.0.1"},
        volumes={str(crawl_dir): {"bind": "/crawls", "mode": "rw"}},
        user=f"{CRAWLER_UID}:{CRAWLER_UID}",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=256,
        mem_limit="1g",
        read_only=True,  # as DockerLauncher: writable are /crawls and a tmpfs /tmp only
        tmpfs={"/tmp": "rw,nosuid,nodev,noexec,size=256m"},
        ulimits=[docker.types.Ulimit(name="nofile", soft=4096, hard=4096)],
        labels={"archiver.test": "test_image"},
    )
    try:
        try:
            result = container.wait(timeout=CRAWL_TIMEOUT)
        except requests.exceptions.ConnectionError:  # the SDK's read timeout
            logs = container.logs(tail=50).decode(errors="replace")
            pytest.fail(f"the crawler did not exit within {CRAWL_TIMEOUT}s; its log:\n{logs}")
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    return result["StatusCode"], logs


def test_the_image_runs_as_the_crawler_user_in_crawls(docker_client, crawler_image):
    image = docker_client.images.get(crawler_image)
    assert image.attrs["Config"]["User"] in ("crawler", "crawler:crawler", "1000:1000")
    assert image.attrs["Config"]["WorkingDir"] == "/crawls"
    assert image.labels["org.opencontainers.image.version"] == archiver_crawler.__version__
    output = docker_client.containers.run(
        crawler_image,
        ["sh", "-c", "id -u; id -g; for c in crawl archiver-crawler; do command -v $c; done"],
        network_mode="none", remove=True,
    ).decode().split()
    assert output[:2] == ["1000", "1000"]
    assert output[2:] == ["/opt/crawler/bin/crawl", "/opt/crawler/bin/archiver-crawler"]


def test_a_crawl_from_the_image_archives_the_site_and_reports_to_redis(
    docker_client, crawler_image, redis_url, crawl_dir
):
    crawl_id = uuid.uuid4().hex[:8]
    hostname = f"crawl-{crawl_id}-0"
    with serve_site() as site:
        (crawl_dir / "crawl.yaml").write_text(
            yaml.safe_dump({"seeds": [site.url], "scopeType": "prefix", "depth": -1,
                            "allowNetworks": ["127.0.0.0/8"]})
        )
        (crawl_dir / "crawl.yaml").chmod(0o644)  # archiver's umask is 077; the container is uid 1000
        code, logs = run_crawler(docker_client, crawler_image, crawl_id, crawl_dir, [
            "--config", "/crawls/crawl.yaml",
            "--workers", "2",
            "--redisStoreUrl", container_redis_url(redis_url),
            "--crawlId", crawl_id,
            "--collection", "tiny",
            "--cwd", "/crawls",
            "--generateWACZ", "--writePagesToRedis", "--logErrorsToRedis",
            "--headless", "--diskUtilization", "90",
        ])

    assert code == 0, logs
    wacz = crawl_dir / "collections" / "tiny" / "tiny.wacz"
    assert wacz.is_file(), logs
    assert wacz.stat().st_uid == CRAWLER_UID
    with zipfile.ZipFile(wacz) as archive:
        names = set(archive.namelist())
        assert archive.testzip() is None
    assert {"datapackage.json", "pages/pages.jsonl", "indexes/index.cdxj"} <= names
    assert any(n.startswith("archive/") and n.endswith(".warc.gz") for n in names)
    validate = subprocess.run(
        [str(Path(sys.executable).with_name("wacz")), "validate", "-f", str(wacz)],
        capture_output=True, text=True, timeout=120,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr

    store = redis.Redis.from_url(redis_url, decode_responses=True)
    assert store.hget(f"{crawl_id}:status", hostname) == "done"
    pages = [json.loads(p) for p in store.lrange(f"{crawl_id}:pages", 0, -1)]
    assert {p["url"] for p in pages} == site.expected_pages("prefix")
    assert int(store.get(f"{crawl_id}:d")) >= 1
