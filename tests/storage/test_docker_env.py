"""The upload contract reaches a crawler container through its environment, and only there:
not its command line, not the Process row, not a log."""

from __future__ import annotations

import json

import pytest

from runner import uploads
from runner.launchers import DockerLauncher, LaunchSpec, install_id
from runner.redis_server import RedisEndpoint
from tests.s3server import ACCESS_KEY, SECRET_KEY, storage_settings

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def docker_settings(data_dir, s3_endpoint, bucket, crawler_image, docker_client):
    settings = storage_settings(data_dir, s3_endpoint, bucket, crawler_image=crawler_image)
    settings = settings.model_copy(update={"launcher": "docker"})
    yield settings
    label = f"archiver.install={install_id(settings)}"
    for container in docker_client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)


def test_the_container_gets_the_store_contract_in_its_environment_only(docker_settings, docker_client):
    instance_dir = docker_settings.crawls_dir / "c0ffee" / "0"
    instance_dir.mkdir(parents=True)
    spec = LaunchSpec(
        crawl_id="c0ffee", instance=0, process_id=3, instance_dir=instance_dir, workers=1,
        redis=RedisEndpoint(host="127.0.0.1", port=9, password="pw", username="crawl-c0ffee"),
        db=5, runner_id="r", config={"seeds": ["http://127.0.0.1:9/"]},
        storage_env=uploads.crawler_env(docker_settings.s3, "c0ffee", "crawl-c0ffee-0", 3),
        report_key=uploads.reports_key("c0ffee"))
    launcher = DockerLauncher(docker_settings)
    launched = launcher.launch(spec)
    try:
        attrs = docker_client.api.inspect_container(launched.ref)
        env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
        assert env["STORE_ENDPOINT_URL"] == f"{docker_settings.storage_endpoint}/{docker_settings.s3.bucket}/"
        assert env["STORE_PATH"] == "archiver/c0ffee/"
        assert (env["STORE_ACCESS_KEY"], env["STORE_SECRET_KEY"]) == (ACCESS_KEY, SECRET_KEY)
        assert env["STORE_FILENAME"] == "@ts-crawl-c0ffee-0-3.wacz"
        # The Redis host the container reaches (host networking, `redis` -> 127.0.0.1).
        assert env["WEBHOOK_URL"] == "redis://crawl-c0ffee:pw@redis:9/5/c0ffee:uploads"
        shown = json.dumps([attrs["Args"], attrs["Config"]["Cmd"], attrs["Config"]["Labels"],
                            launched.args])
        assert SECRET_KEY not in shown and ACCESS_KEY not in shown
    finally:
        launcher.remove(launched.ref)
        launcher.close()
