"""The container's user is the instance folder's owner, uid and gid, in every case.

The real browsertrix-crawler's entrypoint runs the crawler only when `id -u`:`id -g` equal
/crawls' owner; otherwise it tries groupadd/useradd/gosu, which the capabilities archiver
drops forbid. A test image with an entrypoint as strict as that (built here FROM the local
crawler image, removed afterwards) proves the launcher gets both right: as root (the folder
given to uid 1000), and as a non-root archiver on a setgid data dir, where a new folder
takes the data dir's group rather than the user's own.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from archiver.conf import Settings
from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner.launchers import DockerLauncher
from tests.runner.engine_sockets import UnixForwarder
from tests.runner.helpers import is_final, our_containers
from tests.sitegen import serve_site
from tests.waiting import drive

pytestmark = [pytest.mark.docker, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]

STRICT_ENTRYPOINT = """\
#!/bin/sh
# Like the real crawler's entrypoint, but it refuses instead of switching users.
owner=$(stat -c %u:%g /crawls)
me=$(id -u):$(id -g)
if [ "$owner" != "$me" ]; then
    echo "strict-entrypoint: running as $me, but /crawls belongs to $owner" >&2
    exit 1
fi
if ! : > /crawls/.strict-probe 2>/dev/null; then
    echo "strict-entrypoint: cannot write to /crawls as $me" >&2
    exit 1
fi
rm -f /crawls/.strict-probe
exec "$@"
"""


@pytest.fixture(scope="module")
def strict_image(docker_client, crawler_image):
    tag = f"archiver/test-strict-user:{secrets.token_hex(4)}"
    context = Path(tempfile.mkdtemp(prefix="strict-"))
    try:
        (context / "strict-entrypoint").write_text(STRICT_ENTRYPOINT)
        os.chmod(context / "strict-entrypoint", 0o755)  # COPY keeps the mode
        (context / "Dockerfile").write_text(
            f"FROM {crawler_image}\n"
            "COPY strict-entrypoint /usr/local/bin/strict-entrypoint\n"
            'ENTRYPOINT ["/usr/local/bin/strict-entrypoint"]\n')
        docker_client.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def run_strict(docker_client, image: str, folder: Path, user: str) -> tuple[int, str]:
    container = docker_client.containers.run(
        image, ["crawl", "--version"], user=user, network_mode="none", detach=True,
        volumes={str(folder): {"bind": "/crawls", "mode": "rw"}})
    try:
        code = container.wait(timeout=60)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def test_the_strict_image_refuses_a_user_whose_group_is_not_the_folders(docker_client, strict_image, tmp_path):
    folder = tmp_path / "crawls"
    folder.mkdir(mode=0o700)
    os.chown(folder, 1000, 1000)  # as the launcher does as root
    code, log = run_strict(docker_client, strict_image, folder, "1000:1001")
    assert code == 1 and "running as 1000:1001, but /crawls belongs to 1000:1000" in log
    code, log = run_strict(docker_client, strict_image, folder, "1000:1000")
    assert code == 0 and "0.1.0" in log


def test_a_crawl_completes_in_an_image_that_runs_only_as_the_folders_owner(
        make_runner, make_crawl, docker_settings, docker_client, strict_image, no_leftover_containers):
    settings = docker_settings.model_copy(update={"crawler_image": strict_image})
    runner = make_runner(DockerLauncher(settings), settings=settings, clock=db_now)
    with serve_site() as site:
        crawl = make_crawl(site.url, depth=1)
        drive(runner, lambda: our_containers(docker_client, settings) != [], timeout=20)
        (container,) = our_containers(docker_client, settings)
        folder = settings.crawls_dir / crawl.pk / "0"
        owner = os.stat(folder)
        assert container.attrs["Config"]["User"] == f"{owner.st_uid}:{owner.st_gid}"
        drive(runner, is_final(crawl), timeout=90)
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    assert crawl.pages_done >= 2 and crawl.files.count() == 1


# --- archiver as a non-root user, on a setgid data dir -------------------------------------------


@pytest.fixture
def throwaway_user():
    """A system user with its own primary group, and a second group for the data dir."""
    if os.geteuid() != 0:
        pytest.skip("creating a throwaway user needs root; run as root to test a non-root archiver")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    name = f"arch-{secrets.token_hex(3)}"
    shared = f"{name}-s"
    subprocess.run(["groupadd", "--system", shared], check=True)
    try:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", "--groups", shared, name], check=True)
        try:
            import grp
            import pwd

            user = pwd.getpwnam(name)
            yield user.pw_uid, user.pw_gid, grp.getgrnam(shared).gr_gid
        finally:
            subprocess.run(["userdel", name], check=True)  # removes its own group too
    finally:
        subprocess.run(["groupdel", shared], check=True)


@pytest.fixture
def setgid_data_dir(throwaway_user):
    uid, gid, shared_gid = throwaway_user
    data_dir = Path(tempfile.mkdtemp(prefix="arun-", dir="/tmp"))
    os.chown(data_dir, uid, shared_gid)
    os.chmod(data_dir, 0o2700)  # new folders inside take the shared group
    yield data_dir
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def user_docker_socket(throwaway_user, docker_client):
    """The engine, forwarded on a socket only the throwaway user (and root) may use."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip("the engine is not on a Unix socket")
    folder = Path(tempfile.mkdtemp(prefix="afwd-", dir="/tmp"))
    os.chmod(folder, 0o711)
    forwarder = UnixForwarder(folder / "docker.sock", host.removeprefix("unix://"))
    forwarder.on()
    os.chown(forwarder.path, throwaway_user[0], throwaway_user[1])
    os.chmod(forwarder.path, 0o600)
    yield f"unix://{forwarder.path}"
    forwarder.off()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def user_python(throwaway_user):
    """An interpreter the throwaway user may run, with this checkout and its venv's packages.

    The venv's own interpreter may live under a home only root can enter (pyenv in /root);
    Debian's python3.11 then runs the same packages (cp311 wheels). Debian's is 3.11.2, for
    which redis-py also imports async_timeout (not installed for 3.11.7): a one-line module
    gives it asyncio.timeout, which is what that package became in 3.11."""
    shim = Path(tempfile.mkdtemp(prefix="ashim-", dir="/tmp"))  # pytest's tmp_path is root's only
    os.chmod(shim, 0o755)
    (shim / "async_timeout.py").write_text("from asyncio import timeout  # noqa: F401\n")
    os.chmod(shim / "async_timeout.py", 0o644)  # whatever the umask
    site_packages = next(Path(sys.prefix).glob("lib/python3.*/site-packages"))
    path = os.pathsep.join(map(str, (REPO, REPO / "crawler", site_packages, shim)))
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3.11"]):
        try:
            result = run_as(throwaway_user, [python, "-s", "-c", "import django, docker, redis"],
                            {"PYTHONPATH": path})
        except PermissionError:
            continue
        if result.returncode == 0:
            yield [python, "-s", str(REPO / "manage.py")], path
            shutil.rmtree(shim)
            return
    shutil.rmtree(shim)
    pytest.skip("no Python 3.11 that a non-root user may run (the venv's lives under a private home)")


def run_as(user, argv: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    uid, gid, shared_gid = user
    return subprocess.run(argv, cwd="/", env=env, user=uid, group=gid, extra_groups=[shared_gid],
                          capture_output=True, text=True, timeout=timeout)


def test_a_non_root_archiver_on_a_setgid_data_dir_completes_a_crawl_in_the_strict_image(
        throwaway_user, setgid_data_dir, user_docker_socket, user_python, strict_image, redis_server,
        docker_client):
    uid, gid, shared_gid = throwaway_user
    assert gid != shared_gid
    manage, python_path = user_python
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "PYTHONPATH": python_path,
           "PYTHONDONTWRITEBYTECODE": "1", "ARCHIVER_DATA_DIR": str(setgid_data_dir),
           "ARCHIVER_REDIS_URL": redis_server.url(0), "ARCHIVER_LAUNCHER": "docker",
           "ARCHIVER_CRAWLER_IMAGE": strict_image, "DOCKER_HOST": user_docker_socket,
           "ARCHIVER_CRAWL_ALLOW_NETWORKS": "127.0.0.0/8", "ARCHIVER_POLL_INTERVAL": "0.5",
           "ARCHIVER_HOST_RATE": "0"}
    settings = Settings(data_dir=setgid_data_dir)
    try:
        migrated = run_as(throwaway_user, [*manage, "migrate", "-v0"], env)
        assert migrated.returncode == 0, migrated.stderr
        with serve_site() as site:
            added = run_as(throwaway_user, [*manage, "add", site.url, "--depth", "1"], env)
            assert added.returncode == 0, added.stderr
            crawl_id = added.stdout.strip()
            run = run_as(throwaway_user, [*manage, "run", "--no-live"], env, timeout=240)
            assert run.returncode == 0, run.stderr[-3000:]
        status = json.loads(run_as(throwaway_user, [*manage, "status", crawl_id, "--json"], env).stdout)
    finally:
        for container in our_containers(docker_client, settings):
            container.remove(force=True)
    assert status["status"] == "complete", (status, run.stderr[-3000:])
    # The strict entrypoint ran the crawler, so the container's user was uid:<shared group>.
    assert status["pages_done"] >= 2 and len(status["files"]) == 1
    kept = next((setgid_data_dir / "archives").rglob("*.wacz"))
    assert (kept.stat().st_uid, kept.stat().st_gid) == (uid, shared_gid)
