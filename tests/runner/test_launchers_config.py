"""The crawler's config file: written as a new 0600 file and renamed into place, so what a
crawler planted at its name (a link, a FIFO) is replaced or refused, never followed."""

from __future__ import annotations

import json
import os
import stat

import pytest

from archiver.errors import LaunchError
from runner.launchers import CONFIG_NAME, LaunchSpec, write_crawler_config
from runner.redis_server import RedisEndpoint

URL = "redis://:pw@redis:7000/3"


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "instance"
    path.mkdir()
    return path


def test_the_config_is_written_with_the_redis_url_readable_by_its_owner_only(folder):
    previous = os.umask(0)  # a permissive umask changes nothing
    try:
        write_crawler_config(folder, {"seeds": ["http://a.example/"], "depth": 1}, URL)
    finally:
        os.umask(previous)
    path = folder / CONFIG_NAME
    assert json.loads(path.read_text()) == {"seeds": ["http://a.example/"], "depth": 1, "redisStoreUrl": URL}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == [CONFIG_NAME]  # no temp file left


def test_a_link_planted_at_the_config_name_is_replaced_not_followed(folder, tmp_path):
    host_file = tmp_path / "host-file"
    host_file.write_text("precious")
    (folder / CONFIG_NAME).symlink_to(host_file)

    write_crawler_config(folder, {"seeds": ["http://a.example/"]}, URL)
    assert host_file.read_text() == "precious"
    assert not (folder / CONFIG_NAME).is_symlink()
    assert json.loads((folder / CONFIG_NAME).read_text())["redisStoreUrl"] == URL


def test_without_a_config_the_daemons_file_gets_the_redis_url_added(folder):
    (folder / CONFIG_NAME).write_text(json.dumps({"seeds": ["http://a.example/"], "redisStoreUrl": "old"}))
    write_crawler_config(folder, None, URL)
    assert json.loads((folder / CONFIG_NAME).read_text()) == {"seeds": ["http://a.example/"], "redisStoreUrl": URL}


@pytest.mark.parametrize("plant", ["symlink", "fifo", "huge", "list"])
def test_without_a_config_a_planted_file_is_refused_and_nothing_else_is_touched(folder, tmp_path, plant):
    host_file = tmp_path / "host-file"
    host_file.write_text(json.dumps({"seeds": ["http://host/"]}))
    path = folder / CONFIG_NAME
    if plant == "symlink":
        path.symlink_to(host_file)
    elif plant == "fifo":
        os.mkfifo(path)  # opening it for reading would block forever
    elif plant == "huge":
        with open(path, "wb") as handle:
            handle.truncate(2**40)  # sparse
    else:
        path.write_text("[1, 2]")

    with pytest.raises(LaunchError) as raised:
        write_crawler_config(folder, None, URL)
    assert "pw" not in str(raised.value)
    assert host_file.read_text() == json.dumps({"seeds": ["http://host/"]})


def test_an_instance_folder_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "instance").symlink_to(real)
    with pytest.raises(LaunchError):
        write_crawler_config(tmp_path / "instance", {}, URL)
    assert list(real.iterdir()) == []


def test_the_crawler_arguments_hold_no_redis_url_and_no_password(tmp_path):
    endpoint = RedisEndpoint(host="127.0.0.1", port=7000, password="s3cr/et", databases=256)
    spec = LaunchSpec(crawl_id="abc", instance=0, process_id=1, instance_dir=tmp_path, workers=1,
                      redis=endpoint, db=3, runner_id="r")
    args = spec.crawler_args("/crawls")
    assert "--redisStoreUrl" not in args and "s3cr" not in " ".join(args)
    assert args[:2] == ["--config", f"/crawls/{CONFIG_NAME}"]
    assert spec.redis_url("redis") == "redis://:s3cr%2Fet@redis:7000/3"
