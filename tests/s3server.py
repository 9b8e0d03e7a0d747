"""moto's standalone S3 server as a real process on 127.0.0.1, for the storage tests and the
chaos trials (docs/storage.md says why this server). Imports nothing of archiver's."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from archiver.conf import Settings
from tests.ports import free_port

ACCESS_KEY = "archiver-test-access"
SECRET_KEY = "s3cr3t-Value-That-Must-Never-Show-0123456789"
PREFIX = "archiver"
_buckets = itertools.count(1)


class MotoMissing(RuntimeError):
    pass


def moto_command() -> str:
    found = Path(sys.executable).with_name("moto_server")
    if found.exists():
        return str(found)
    binary = shutil.which("moto_server")
    if binary is None:
        raise MotoMissing("moto_server is missing: pip install 'moto[server]' (the test extra)")
    return binary


class MotoServer:
    """`moto_server -H 127.0.0.1 -p <free port>`, its output in `log_path`; stop() by pid."""

    def __init__(self, log_path: Path, timeout: float = 30):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([moto_command(), "-H", "127.0.0.1", "-p", str(port)],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1).close()  # noqa: S310
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start (log: {log_path})") from None
                time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


def stop_process(process: subprocess.Popen, timeout: float = 10) -> None:
    """A server process of the tests: terminated, killed if it does not end in `timeout` s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def new_bucket(endpoint: str) -> str:
    """A new, empty bucket on the server at `endpoint`."""
    name = f"archives-{next(_buckets)}-{int(time.time() * 1000) % 100000}"
    client = client_for(endpoint)
    client.create_bucket(Bucket=name)
    client.close()
    return name


def client_for(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, config=Config(s3={"addressing_style": "path"}))


def storage_env(endpoint: str, bucket: str, prefix: str = PREFIX) -> dict[str, str]:
    """The settings that put a runner's archives in `bucket` (docs/storage.md)."""
    return {"ARCHIVER_STORAGE_URL": f"s3://{bucket}/{prefix}", "ARCHIVER_STORAGE_ENDPOINT": endpoint,
            "ARCHIVER_STORAGE_ACCESS_KEY": ACCESS_KEY, "ARCHIVER_STORAGE_SECRET_KEY": SECRET_KEY}


def storage_settings(data_dir: Path, endpoint: str, bucket: str, **more) -> Settings:
    """A runner's settings with its archives in `bucket` on the server at `endpoint`."""
    return Settings(data_dir=data_dir, launcher="local", poll_interval=0.2, lease_seconds=5,
                    storage_url=f"s3://{bucket}/archiver", storage_endpoint=endpoint,
                    storage_access_key=ACCESS_KEY, storage_secret_key=SECRET_KEY,
                    **{"host_rate": 0.0, **more})
