"""archiver's crawler keeps the real crawler's upload contract: STORE_* in, object in the
bucket, `{id, user, filename, path, size, hash, bytes, completed}` reported by RPUSH or POST."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest
import redis
from archiver_crawler.config import parse_args
from archiver_crawler.errors import ConfigError, UploadFailed
from archiver_crawler.upload import interpolate, report, store_from_env, upload

from tests.s3server import ACCESS_KEY, SECRET_KEY


def contract(endpoint: str, bucket: str, webhook: str = "", **more) -> dict[str, str]:
    return {"STORE_ENDPOINT_URL": f"{endpoint}/{bucket}/", "STORE_PATH": "archiver/c1/",
            "STORE_ACCESS_KEY": ACCESS_KEY, "STORE_SECRET_KEY": SECRET_KEY,
            "STORE_REGION": "us-east-1", "WEBHOOK_URL": webhook, **more}


def test_the_store_is_read_from_the_environment_as_the_real_crawler_reads_it():
    store = store_from_env(contract("http://127.0.0.1:9000", "archives"))
    assert (store.endpoint, store.bucket, store.prefix) == ("http://127.0.0.1:9000", "archives", "archiver/c1/")
    assert store.full_prefix == "http://127.0.0.1:9000/archives/archiver/c1/"
    assert store.filename == "@ts-@id.wacz"
    assert SECRET_KEY not in repr(store) and ACCESS_KEY not in repr(store)
    assert store_from_env({}) is None


@pytest.mark.parametrize("env, message", [
    ({"STORE_ENDPOINT_URL": "ftp://host/bucket/"}, "http(s) URL"),
    ({"STORE_ENDPOINT_URL": "http://host:9000/"}, "names no bucket"),
    ({"STORE_ENDPOINT_URL": "http://host/b/", "WEBHOOK_URL": "redis://host:6379/0"}, "redis://host:port/db/key"),
    ({"STORE_ENDPOINT_URL": "http://host/b/", "WEBHOOK_URL": "file:///x"}, "WEBHOOK_URL"),
])
def test_a_malformed_store_is_a_configuration_error(env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        store_from_env(env)


def test_a_bad_store_stops_the_crawler_at_start_with_exit_code_4(tmp_path):
    with pytest.raises(ConfigError):
        parse_args(["--url", "http://example.org/", "--cwd", str(tmp_path)],
                   env={"STORE_ENDPOINT_URL": "http://host:9000/"})


def test_file_names_are_interpolated_once_per_token():
    now = dt.datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    assert interpolate("@ts-@id.wacz", "c1", "crawl-c1-0", now) == "20300102030405678-c1.wacz"
    assert interpolate("@hostsuffix-@hostname-@id-@id", "c1", "crawl-0123456789abcdef-0", now) \
        == "456789abcdef-0-crawl-0123456789abcdef-0-c1-@id"


def test_an_upload_is_in_the_bucket_and_reported_by_rpush(s3_endpoint, bucket, s3, redis_url, tmp_path):
    wacz = tmp_path / "c1.wacz"
    wacz.write_bytes(b"PK" + bytes(range(256)) * 1000)
    store = store_from_env(contract(s3_endpoint, bucket, webhook=f"{redis_url}/c1:uploads",
                                    STORE_USER="someone"))
    body = upload(store, wacz, "20300102-c1.wacz", "c1", completed=True)
    asyncio.run(report(store, body))

    data = s3.get_object(Bucket=bucket, Key="archiver/c1/20300102-c1.wacz")["Body"].read()
    assert data == wacz.read_bytes()
    (raw,) = redis.Redis.from_url(redis_url).lrange("c1:uploads", 0, -1)
    assert json.loads(raw) == {
        "id": "c1", "user": "someone", "filename": f"{s3_endpoint}/{bucket}/archiver/c1/20300102-c1.wacz",
        "path": "20300102-c1.wacz", "size": len(data), "hash": hashlib.sha256(data).hexdigest(),
        "bytes": len(data), "completed": True,
    }


def test_an_upload_can_be_reported_by_http_post(s3_endpoint, bucket, tmp_path):
    received = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the standard library's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        wacz = tmp_path / "c1.wacz"
        wacz.write_bytes(b"x" * 100)
        store = store_from_env(contract(s3_endpoint, bucket,
                                        webhook=f"http://127.0.0.1:{server.server_port}/hook"))
        asyncio.run(report(store, upload(store, wacz, "a.wacz", "c1", completed=False)))
    finally:
        server.shutdown()
        server.server_close()
    assert received[0]["path"] == "a.wacz" and received[0]["completed"] is False


def test_a_failed_upload_names_the_key_and_no_secret(tmp_path):
    wacz = tmp_path / "c1.wacz"
    wacz.write_bytes(b"x")
    from tests.ports import free_port

    store = store_from_env(contract(f"http://127.0.0.1:{free_port()}", "nowhere"))
    with pytest.raises(UploadFailed) as failed:
        upload(store, wacz, "a.wacz", "c1", completed=True)
    assert "s3://nowhere/archiver/c1/a.wacz" in str(failed.value)
    assert SECRET_KEY not in str(failed.value) and ACCESS_KEY not in str(failed.value)


def test_a_missing_bucket_is_an_upload_failure(s3_endpoint, bucket, tmp_path):
    wacz = tmp_path / "c1.wacz"
    wacz.write_bytes(b"x")
    env = contract(s3_endpoint, "no-such-bucket-here")
    with pytest.raises(UploadFailed, match="NoSuchBucket"):
        upload(store_from_env(env), wacz, "a.wacz", "c1", completed=True)
    assert Path(wacz).exists()  # the local WACZ stays: a relaunch packs and uploads again
