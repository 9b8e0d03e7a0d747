"""`archiver pull`: a registry image is fetched outside the daemon with progress; archiver's own
image is never pulled; a registry that cannot be reached is one clear line and exit 1, quickly.

Nothing leaves the machine: the registries are on 127.0.0.1 (a closed port, or a minimal
registry served by the test), which the engine treats as insecure (plain HTTP) by default.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.waiting import HANG

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.docker, pytest.mark.slow]

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def pull(image: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(REPO / "manage.py"), "pull"], cwd=REPO, capture_output=True,
                            text=True, timeout=120,
                            env={**clean, "PYTHONPATH": str(REPO), "ARCHIVER_CRAWLER_IMAGE": image, **env})
    return result, time.monotonic() - started


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def one_layer_image() -> dict[str, tuple[str, bytes]]:
    """Blobs and manifest of an image holding one file: {path: (content type, body)}."""
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        payload = os.urandom(3 << 20)  # big enough for the engine to report download progress
        info = tarfile.TarInfo("hello.bin")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    layer = gzip.compress(tar.getvalue(), compresslevel=1)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = json.dumps({"architecture": arch, "os": "linux", "config": {"Cmd": ["/hello.bin"]},
                         "rootfs": {"type": "layers", "diff_ids": [digest(tar.getvalue())]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "size": len(config), "digest": digest(config)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer), "digest": digest(layer)}],
    }).encode()
    return {
        "/v2/": ("application/json", b"{}"),
        "/v2/archiver-test/pulled/manifests/1": (MANIFEST_TYPE, manifest),
        f"/v2/archiver-test/pulled/manifests/{digest(manifest)}": (MANIFEST_TYPE, manifest),  # by digest too
        f"/v2/archiver-test/pulled/blobs/{digest(config)}": ("application/octet-stream", config),
        f"/v2/archiver-test/pulled/blobs/{digest(layer)}": ("application/octet-stream", layer),
    }


@contextmanager
def registry() -> Iterator[str]:
    """A read-only registry (the v2 API's GET and HEAD) on 127.0.0.1; yields its host:port."""
    files = one_layer_image()

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self):
            self._answer(body=False)

        def do_GET(self):
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            found = files.get(self.path)
            if found is None:
                self.send_error(404)
                return
            kind, data = found
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Docker-Content-Digest", digest(data))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.end_headers()
            if body:
                self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_an_image_is_pulled_with_progress_and_is_then_on_the_engine(docker_client):
    with registry() as address:
        image = f"{address}/archiver-test/pulled:1"
        try:
            result, _ = pull(image)
            assert result.returncode == 0, result.stderr
            assert docker_client.images.get(image).attrs["Config"]["Cmd"] == ["/hello.bin"]
        finally:
            docker_client.images.remove(image, force=True)
    lines = result.stdout.splitlines()
    assert "Pulling from archiver-test/pulled" in lines[0]
    assert any(line.endswith(": Pull complete") for line in lines)
    assert f"Status: Downloaded newer image for {image}" in lines
    assert lines[-1] == f"{image} is on the Docker engine; `archiver doctor` checks it."
    assert result.stderr == ""


def test_a_registry_nobody_answers_on_is_one_line_and_exit_1_quickly(docker_client):
    image = "127.0.0.1:1/x:y"  # a closed port: nothing leaves the machine
    result, took = pull(image)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"CommandError: cannot pull {image}: ") and "connection refused" in line
    assert took < HANG  # refused at once: no retries until some timeout
    assert docker_client.images.list(name=image) == []


def test_archivers_own_image_is_never_pulled_the_build_script_makes_it():
    result, _ = pull("archiver/crawler:9.9.9")
    assert result.returncode == 1
    assert result.stderr == ("CommandError: archiver/crawler:9.9.9 is archiver's own crawler, built on this "
                             "machine and never pulled: run scripts/build-crawler-image.sh\n")


def test_no_engine_is_one_line_and_exit_1(tmp_path):
    result, took = pull("127.0.0.1:1/x:y", DOCKER_HOST=f"unix://{tmp_path}/none.sock")
    assert result.returncode == 1
    assert result.stderr == ("CommandError: cannot pull 127.0.0.1:1/x:y: Docker engine unreachable "
                             "(FileNotFoundError)\n")
