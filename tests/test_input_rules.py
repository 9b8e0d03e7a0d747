"""One set of input rules (issue 41): what the CLI, the API and the admin refuse, and in which
words, where they had differed. At a shell (exit codes and stderr), through the API's test
client, and under gunicorn with scripts/start.sh's own command line for the admin."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.installation import ROOT, Installation
from tests.ports import free_port
from tests.s3server import stop_process
from tests.waiting import wait_for


def shell(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DJANGO_"))}
    env["ARCHIVER_DATA_DIR"] = str(data_dir)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules")
    assert shell(path, "migrate", "-v0").returncode == 0
    return path


# --- sizes and durations: a number read is refused by its range -----------------------------

@pytest.mark.parametrize(("option", "value", "words"), [
    ("--size-limit", "1e30", "--size-limit: must be from 1 byte to 1 PiB"),
    ("--size-limit", "1E30", "--size-limit: must be from 1 byte to 1 PiB"),
    ("--size-limit", "2e-3", "--size-limit: must be from 1 byte to 1 PiB"),
    ("--time-limit", "1e30", "--time-limit: must be from 1 second to 10 years"),
    ("--time-limit", "1e30d", "--time-limit: must be from 1 second to 10 years"),
])
def test_a_number_written_with_an_exponent_is_refused_by_its_range_exit_1(migrated, option, value, words):
    # They were argparse's "'1e30' is not a size" (exit 2), where 10^30 in digits said the range.
    result = shell(migrated, "add", "https://e.com/", option, value)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"CommandError: {words}\n"


def test_the_api_says_the_same_words_for_the_same_number():
    from archiver.errors import ConfigError
    from crawls.config import CrawlConfig, size_in_bytes

    assert size_in_bytes("1.5e3kb") == 1_500_000
    with pytest.raises(ConfigError, match=r"^size_limit: must be from 1 byte to 1 PiB$"):
        CrawlConfig.parse(seeds=["https://e.com/"], size_limit=10**30)


def test_an_exponent_is_bounded_and_still_a_number_only():
    from archiver.conf import duration_in_seconds
    from crawls.config import size_in_bytes

    assert duration_in_seconds("1.5e2m") == 9000
    for text in ("1e9999", "1e", "e3", "1e3.5", "inf", "1_000"):
        with pytest.raises(ValueError, match="is not a"):
            size_in_bytes(text)
        with pytest.raises(ValueError, match="is not a"):
            duration_in_seconds(text)


# --- search: a query may start with a dash -----------------------------------------------------

def test_a_query_that_starts_with_a_dash_is_the_query_not_an_unknown_option(migrated):
    # `archiver search -walrus` was "the following arguments are required: QUERY" (exit 2).
    alone = shell(migrated, "search", "-walrus", "--limit", "3")
    assert (alone.returncode, alone.stderr) == (
        1, "CommandError: search: the query only says what to leave out: add a word to find\n")
    assert shell(migrated, "search", "--json", "-walrus", "sea").returncode == 2  # two queries: usage
    found = shell(migrated, "search", "--json", "sea -walrus")
    assert (found.returncode, found.stdout) == (0, "[]\n")
    assert "required: QUERY" in shell(migrated, "search", "--json").stderr


# --- the API: booleans are JSON booleans, whole numbers JSON integers ------------------------

@pytest.fixture
def bearer(db, admin_settings, conf_data_dir):
    from django.contrib.auth.models import User

    from crawls.models import ApiToken

    _, secret = ApiToken.issue(User.objects.create_superuser("root"), "rules")
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.parametrize("value", [True, "3", 3.0])
def test_the_api_refuses_a_scale_that_is_not_a_json_integer(client, bearer, value):
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, Org

    crawl = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=["https://e.com/"]))
    answer = client.post(f"/api/v1/crawls/{crawl.id}/scale", {"scale": value},
                         content_type="application/json", headers=bearer)
    assert answer.status_code == 422, answer.content
    assert answer.json() == {"code": "invalid", "message": "scale: Input should be a valid integer"}
    assert Crawl.objects.get(pk=crawl.pk).scale == 1


@pytest.mark.parametrize(("field", "value"), [("max_concurrent_crawls", True), ("max_pages", "5"),
                                              ("storage_quota", False), ("exec_minutes", 2.0)])
def test_the_api_refuses_an_org_quota_that_is_not_a_json_integer(client, bearer, field, value):
    from crawls.models import Org

    answer = client.put("/api/v1/orgs/acme", {field: value}, content_type="application/json", headers=bearer)
    assert answer.status_code == 422, answer.content
    assert answer.json()["code"] == "invalid" and answer.json()["message"].startswith(f"{field}: ")
    assert not Org.objects.filter(slug="acme").exists()


# --- over-long request lines under gunicorn, as scripts/start.sh runs it ----------------------

def admin_command(script: Path, port: int, data_dir: Path) -> list[str]:
    """The admin's gunicorn command line of `script` (start.sh), its variables filled in."""
    text = script.read_text()
    start = text.index('"$ROOT/.venv/bin/gunicorn" archiver.wsgi:application')
    line = text[start:text.index("&\n", start)].replace("\\\n", " ")
    values = {"ROOT": str(ROOT), "PORT": str(port), "ARCHIVER_DATA_DIR": str(data_dir)}
    line = re.sub(r"\$(\w+)", lambda m: values[m.group(1)], line)
    command = shlex.split(line)
    command[0] = str(Path(sys.executable).parent / "gunicorn")
    return command


@pytest.fixture
def admin_server():
    data_dir = Path(tempfile.mkdtemp(prefix="arul-", dir="/tmp"))
    installation = Installation(data_dir)
    installation.migrate(static=True)
    installation.manage("ensureadmin")
    (data_dir / "run").mkdir(exist_ok=True)
    port = free_port()
    server = subprocess.Popen(admin_command(ROOT / "scripts" / "start.sh", port, data_dir), cwd=ROOT,
                              env=installation.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.poll() is not None or answers(url), 60, 0.1, "gunicorn to serve the admin",
                 explain=lambda: (data_dir / "run" / "admin-error.log").read_text()[-2000:])
        assert server.poll() is None, (data_dir / "run" / "admin-error.log").read_text()[-2000:]
        yield url, installation
    finally:
        stop_process(server, timeout=20)
        installation.clean_up()
        shutil.rmtree(data_dir, ignore_errors=True)


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/admin/login/", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def logged_in(url: str, installation: Installation) -> httpx.Client:
    http = httpx.Client(base_url=url, timeout=30)
    http.get("/admin/login/")
    password = (installation.data_dir / "admin-password").read_text().strip()
    done = http.post("/admin/login/?next=/admin/", data={
        "username": "admin", "password": password, "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        headers={"Referer": f"{url}/admin/login/"})
    assert done.status_code == 302, done.text[-500:]
    return http


def test_long_queries_are_answered_by_archiver_never_by_gunicorns_html_page(admin_server):
    # With gunicorn's default limit (4094 bytes) a 5,000-character query was its HTML 414,
    # and a 560-character one archiver's message.
    url, installation = admin_server
    secret = installation.manage("token", "create", "rules", "--user", "admin").split()[-1]
    admin = logged_in(url, installation)
    api = httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {secret}"})
    try:
        page = admin.get("/admin/search/", params={"q": "walrus " * 800})
        assert page.status_code == 400
        assert '<p class="errornote">the query is longer than 500 characters</p>' in page.text
        answer = api.get("/api/v1/search", params={"q": "walrus " * 800})
        assert answer.status_code == 422 and answer.json()["code"] == "invalid"
        assert answer.json()["message"].startswith("q: ")
        for client in (api, admin):  # past what any query needs: gunicorn answers, in JSON
            answer = client.get("/api/v1/search", params={"q": "walrus " * 1500})
            assert answer.status_code == 414
            assert answer.headers["content-type"] == "application/json"
            assert answer.json() == {"code": "request_too_long", "message": (
                "the request line is longer than this server takes (8190 bytes); a search query "
                "is at most 500 characters")}
        # A page whose URL is that long still has its own stylesheets: their Referer fits.
        long_page = f"{url}/admin/search/?q={'w' * 8000}"
        style = admin.get("/static/admin/css/base.css", headers={"Referer": long_page})
        assert style.status_code == 200
    finally:
        admin.close()
        api.close()
