"""archiver installed from its wheel alone, as `pip install .` or `pipx install .` does.

The wheel is built from a copy of the source tree (an in-tree build would leave build/ and
*.egg-info behind, and reuse them next time), installed into a new virtualenv with its
dependencies from the package index (or pip's cache), and used from a folder outside the
repository: `archiver --version`, `check`, `migrate`, `collectstatic`, `add` and `run`
crawling a site on 127.0.0.1 with the local launcher. ARCHIVER_TEST_WHEEL_PYTHON picks
another interpreter for the virtualenv (for example a Python 3.13).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import archiver_crawler
import django
import pytest

import archiver
from tests.runner.helpers import stop_processes_of
from tests.sitegen import serve_site

REPO = Path(__file__).resolve().parent.parent
# Never in a wheel: what a checkout accumulates, and what is fetched at set-up.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "data", "build", "dist", "*.egg-info",
                                    "__pycache__", ".pytest_cache", ".ruff_cache", ".ci-state",
                                    "test-artifacts", "node_modules")
IN_THE_WHEEL = [
    "archiver/cli.py", "archiver/settings.py", "runner/local_wrapper.py",
    "crawls/migrations/0001_initial.py", "crawls/static/crawls/live.js",
    "crawls/static/crawls/admin.css", "crawls/templates/admin/crawls/crawl/replay.html",
    "crawls/templates/replay/page.html", "archiver/replay_wsgi.py",
    "archiver_crawler/netpolicy.py", "archiver_crawler/launch.py",
]


def requirement_names(requirements: list[str]) -> dict[str, str]:
    return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower(): r for r in requirements}


def test_archiver_depends_on_everything_the_crawler_it_carries_depends_on():
    def dependencies(path: Path) -> dict[str, str]:
        return requirement_names(tomllib.loads(path.read_text())["project"]["dependencies"])

    ours = dependencies(REPO / "pyproject.toml")
    crawler = dependencies(REPO / "crawler" / "pyproject.toml")
    assert {name: ours.get(name) for name in crawler} == crawler
    assert "archiver-crawler" not in ours  # on no index: `pip install .` could not resolve it


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    # No build isolation: the test venv's setuptools builds it, without a network.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(work / "dist"), str(source)],
                   check=True, capture_output=True, text=True, timeout=120)
    (built,) = (work / "dist").glob("archiver-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv")
    python = os.environ.get("ARCHIVER_TEST_WHEEL_PYTHON", sys.executable)
    subprocess.run([python, "-m", "venv", str(path)], check=True, timeout=120)
    result = subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "--quiet",
                             "--no-compile", "--disable-pip-version-check", str(wheel)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return path


def test_the_wheel_holds_the_packages_templates_static_files_and_migrations(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(IN_THE_WHEEL) <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "crawls/replayweb/", "crawls/static/crawls/replay/"))]
    metadata = zipfile.ZipFile(wheel).read(f"archiver-{archiver.__version__}.dist-info/METADATA")
    assert b"Requires-Python: >=3.11\n" in metadata
    # The in-memory fakes are tests/fakes.py: the package carries none, needs no fakeredis.
    assert "runner/testing.py" not in names
    fakeredis = [line for line in metadata.decode().splitlines() if "fakeredis" in line]
    assert fakeredis and all(line.endswith('extra == "test"') for line in fakeredis), fakeredis


def test_no_installed_module_imports_the_tests_or_fakeredis():
    imports = re.compile(r"^\s*(from|import)\s+(tests|fakeredis)\b", re.MULTILINE)
    offenders = [str(path.relative_to(REPO)) for package in ("archiver", "crawls", "runner", "crawler/archiver_crawler")
                 for path in (REPO / package).rglob("*.py") if imports.search(path.read_text())]
    assert offenders == []


class Installed:
    """The virtualenv's `archiver`, run in a folder of its own with a data dir of its own."""

    def __init__(self, venv: Path, home: Path):
        self.bin = venv / "bin"
        self.home = home
        self.data_dir = home / "data"
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("ARCHIVER_", "DJANGO_", "PYTHON", "VIRTUAL_ENV"))}
        self.env = {**keep, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
                    "ARCHIVER_DATA_DIR": str(self.data_dir), "ARCHIVER_LAUNCHER": "local",
                    "ARCHIVER_CRAWL_ALLOW_NETWORKS": "127.0.0.0/8", "ARCHIVER_POLL_INTERVAL": "0.2",
                    "ARCHIVER_CHROMIUM": "none"}  # HTTP mode: the install is tested, not the browser

    def __call__(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(["archiver", *args], cwd=self.home, env=self.env,
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"archiver {' '.join(args)}: {result.stderr[-3000:]}"
        return result.stdout

    def clean_up(self) -> None:
        """The crawlers and the embedded Redis `run --once` leaves running, when a step failed."""
        stop_processes_of(self.data_dir)


@pytest.fixture
def installed(venv, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    archiver_command = Installed(venv, home)
    try:
        yield archiver_command
    finally:
        archiver_command.clean_up()


@pytest.mark.slow
def test_the_installed_wheel_migrates_serves_its_static_files_and_crawls(installed, venv):
    assert installed("--version").splitlines()[:3] == [
        f"archiver {archiver.__version__}", f"archiver-crawler {archiver_crawler.__version__}",
        f"Django {django.get_version()}"]
    installed("migrate", "-v0")
    assert (installed.data_dir / "archiver.sqlite3").is_file()
    doctor = installed("doctor")  # exit 0: every check passed (the local crawler included)
    assert "✗" not in doctor and "crawler" in doctor.lower(), doctor

    # Where `scripts/replay-files.sh data/replay` puts ReplayWeb.page for a wheel install.
    (installed.data_dir / "replay").mkdir()
    (installed.data_dir / "replay" / "ui.js").write_text("/* ReplayWeb.page */\n")
    installed("collectstatic", "--noinput", "-v0")
    static = installed.data_dir / "static"
    assert (static / "admin" / "css" / "base.css").is_file()
    assert (static / "crawls" / "live.js").is_file()
    assert not (static / "crawls" / "replay").exists()  # only the replay origin serves it
    assert installed("shell", "-v0", "-c", "from crawls.replay_views import replay_folder; "
                     "print(replay_folder())").strip() == str(installed.data_dir / "replay")
    where = installed("shell", "-v0", "-c", "import archiver_crawler, crawls; "
                      "from django.template.loader import get_template; "
                      "print(crawls.__file__, archiver_crawler.__file__, "
                      "get_template('admin/crawls/crawl/replay.html').origin.name)").split()
    assert all(path.startswith(str(venv)) for path in where), where

    with serve_site(pages=5) as site:
        crawl_id = installed("add", site.url).strip()
        installed("run", "--once")  # one tick: the crawl is launched
        assert json.loads(installed("status", crawl_id, "--json"))["status"] in {"starting", "running"}
        installed("run")  # until nothing is due or running: the crawl is followed to its end
    crawl = json.loads(installed("status", crawl_id, "--json"))
    assert crawl["status"] == "complete", crawl
    assert crawl["pages_done"] == len(site.expected_pages())
    (archive,) = crawl["files"]
    assert (installed.data_dir / archive["path"]).stat().st_size == archive["size"]
