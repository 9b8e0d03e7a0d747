"""What the admin's browser tests share: an installation, the admin and the replay origin
served by gunicorn exactly as scripts/start.sh serves them, and a headless Chromium.

The admin is http://127.0.0.1:<port>; the replay origin http://127.0.0.2:<port>
(ARCHIVER_REPLAY_URL), a host name of its own, as on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.admin.browsing import wait_until
from tests.installation import GUNICORN_LIMITS, ROOT, Installation
from tests.ports import free_port
from tests.s3server import stop_process

REPLAY_FILES = ROOT / "crawls" / "replayweb"
REPLAY_HOST = "127.0.0.2"


class Screenshots:
    def __init__(self, driver, folder: Path):
        self.driver, self.folder, self.count = driver, folder, 0
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

    def take(self, name: str) -> None:
        self.count += 1
        self.driver.save_screenshot(str(self.folder / f"{self.count:02d}-{name}.png"))


@pytest.fixture
def data_dir():
    # Short, so the wake socket's path fits a Unix socket address.
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="aadm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def installation(data_dir):
    if not (REPLAY_FILES / "ui.js").exists() or not (REPLAY_FILES / "sw.js").exists():
        pytest.fail("ReplayWeb.page's files are missing: run bash scripts/replay-files.sh "
                    "(scripts/test.sh does)")
    inst = Installation(data_dir)
    # Crawls of 127.0.0.1 must be allowed where an address policy applies (issue 10).
    inst.env["ARCHIVER_CRAWL_ALLOW_NETWORKS"] = "127.0.0.0/8"
    inst.migrate(static=True)
    inst.manage("ensureadmin")
    try:
        yield inst
    finally:
        inst.clean_up()


# The two servers of scripts/start.sh: (WSGI application, log name, a path that answers).
ADMIN = ("archiver.wsgi:application", "admin", "/admin/login/", b"archiver")
REPLAY = ("archiver.replay_wsgi:application", "replay", "/replay/", b"ReplayWeb.page")


@pytest.fixture
def replay_url(installation):
    """The replay origin, served by its own gunicorn; its URL (ARCHIVER_REPLAY_URL)."""
    with served(installation, REPLAY, REPLAY_HOST) as url:
        yield url


@pytest.fixture
def admin_url(installation, replay_url):
    """The admin served by gunicorn with start.sh's options; its base URL."""
    with served(installation, ADMIN, "127.0.0.1") as url:
        yield url


class served:  # noqa: N801 - used as `with served(...)`
    """One gunicorn of start.sh on a free port of `host`. A free port can be taken by another
    process before gunicorn binds it (the machine is shared): then gunicorn exits, and it is
    started again on another port. The replay server's URL goes into the installation's
    environment (ARCHIVER_REPLAY_URL) before the admin starts."""

    def __init__(self, installation, app: tuple, host: str):
        self.installation, self.app, self.host, self.server = installation, app, host, None

    def __enter__(self) -> str:
        name = self.app[1]
        self.log = open(self.installation.data_dir / f"{name}-gunicorn.log", "w")  # noqa: SIM115
        for _ in range(3):
            port = free_port(self.host)
            url = f"http://{self.host}:{port}"
            if name == "replay":
                self.installation.env["ARCHIVER_REPLAY_URL"] = url
            self.server = start_gunicorn(self.installation, self.app, f"{self.host}:{port}", self.log)
            if serving(self.server, url, self.app):
                return url
            self.server.wait()
        log = (self.installation.data_dir / f"{name}-gunicorn.log").read_text()[-2000:]
        pytest.fail(f"gunicorn ({name}) did not start: {log}")

    def __exit__(self, *exc) -> None:
        if self.server is not None:
            stop_process(self.server, timeout=20)
        self.log.close()


def start_gunicorn(installation, app: tuple, bind: str, log) -> subprocess.Popen:
    run = installation.data_dir / "run"
    run.mkdir(exist_ok=True)
    wsgi, name = app[0], app[1]
    pid = "gunicorn.pid" if name == "admin" else f"{name}.pid"
    return subprocess.Popen(  # the command lines of scripts/start.sh
        [str(Path(sys.executable).parent / "gunicorn"), wsgi,
         "--bind", bind, "--workers", "2", "--threads", "4", "--umask", "0077",
         *(GUNICORN_LIMITS if name == "admin" else ()),
         "--logger-class", "archiver.replay_logging.AccessLogger",
         "--pid", str(run / pid),
         "--access-logfile", str(run / f"{name}-access.log"),
         "--error-logfile", str(run / f"{name}-error.log")],
        cwd=ROOT, env=installation.env, stdout=log, stderr=subprocess.STDOUT,
    )


def serving(server: subprocess.Popen, url: str, app: tuple) -> bool:
    """Wait until gunicorn serves its application (True) or has exited (False)."""
    wait_until(lambda: server.poll() is not None or answers(url + app[2], app[3]), 60,
               f"gunicorn to serve the {app[1]}")
    return server.poll() is None


def answers(url: str, marker: bytes) -> bool:
    """True once the URL answers with the marker (our server, not some other one)."""
    import urllib.error
    import urllib.request

    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
        with direct.open(url, timeout=2) as page:
            return marker in page.read(65536)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def browser(monkeypatch):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.fail("chromium and chromium-driver are not installed (scripts/test.sh installs them)")
    monkeypatch.setenv("SE_OFFLINE", "true")  # never let Selenium download a browser
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-default-apps", "--disable-sync", "--disable-extensions",
        # Anything not on loopback goes to a proxy that does not exist: the test stays local.
        "--proxy-server=http://127.0.0.1:9",  # loopback (127.0.0.0/8) itself is never proxied
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(browser, request) -> Screenshots:
    folder = Path(os.environ.get("ARCHIVER_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "admin-browser"
    return Screenshots(browser, folder / request.node.name)


