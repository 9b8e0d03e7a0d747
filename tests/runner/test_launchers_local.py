"""The local launcher on real processes: what a crawler process gets (and does not), and
instances found again after the launcher died in the middle of a launch."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from archiver.conf import Settings
from archiver.errors import ConfigError
from runner.launchers import CONFIG_NAME, LaunchSpec, LocalLauncher
from runner.local_wrapper import FSIZE, NOFILE
from runner.redis_server import RedisEndpoint
from tests.runner.helpers import processes_mentioning
from tests.waiting import wait_for_exit

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pa55-w0rd-never-in-argv"
ALLOWED = {"PATH", "LANG", "TZ", "PYTHONPATH", "HOME", "CRAWLER_HOSTNAME", "CRAWL_ID"}


def executable(path: Path, body: str) -> list[str]:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return [str(path)]


def make_spec(settings: Settings, process_id: int = 7, workers: int = 2) -> LaunchSpec:
    instance_dir = settings.crawls_dir / "c0ffee" / "0"
    instance_dir.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(crawl_id="c0ffee", instance=0, process_id=process_id, instance_dir=instance_dir,
                      workers=workers, redis=RedisEndpoint(host="127.0.0.1", port=9, password=PASSWORD),
                      db=3, runner_id="r", config={"seeds": ["http://127.0.0.1:9/"]})


@pytest.fixture
def cleanup(settings):
    launchers: list[LocalLauncher] = []
    yield launchers.append
    for launcher in launchers:
        for instance in launcher.list():
            launcher.remove(instance.ref)
    assert processes_mentioning(str(settings.data_dir)) == []


REPORT = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, resource, sys
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    limits = {{name: resource.getrlimit(getattr(resource, name))
              for name in ("RLIMIT_DATA", "RLIMIT_NOFILE", "RLIMIT_FSIZE")}}
    with open("report.json", "w") as out:
        json.dump({{"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "limits": limits,
                   "no_new_privs": status["NoNewPrivs"].strip()}}, out)
""")


def test_a_local_crawler_gets_only_allowed_variables_limits_and_no_new_privileges(
        settings, tmp_path, monkeypatch, cleanup):
    monkeypatch.setenv("ARCHIVER_SECRET_KEY", "secret-key-value")
    monkeypatch.setenv("ARCHIVER_DATABASE_URL", "postgres://u:dbpass@127.0.0.1/x")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:dbpass@127.0.0.1/y")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    launcher = LocalLauncher(settings, command=executable(tmp_path / "report", REPORT))
    cleanup(launcher)
    spec = make_spec(settings, workers=2)

    launched = launcher.launch(spec)
    assert wait_for_exit(launcher, launched.ref).exit_code == 0, list(spec.instance_dir.iterdir())

    report = json.loads((spec.instance_dir / "report.json").read_text())
    env = report["env"]
    assert set(env) - {"LC_ALL"} <= ALLOWED, sorted(set(env) - ALLOWED)
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["HOME"] == report["cwd"] == str(spec.instance_dir)
    assert (env["CRAWL_ID"], env["CRAWLER_HOSTNAME"]) == ("c0ffee", "crawl-c0ffee-0")
    assert "secret-key-value" not in json.dumps(report) and "dbpass" not in json.dumps(report)
    assert report["no_new_privs"] == "1"
    memory = 2**30 + 768 * 2**20  # the container rule for two workers
    assert report["limits"]["RLIMIT_DATA"] == [memory, memory]
    assert report["limits"]["RLIMIT_NOFILE"] == [NOFILE, NOFILE]
    assert report["limits"]["RLIMIT_FSIZE"] == [FSIZE, FSIZE]
    # The Redis password is in the 0600 config file only: not in argv, not in the stored args.
    assert PASSWORD not in " ".join(report["argv"]) and PASSWORD not in " ".join(launched.args)
    config_file = spec.instance_dir / CONFIG_NAME
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    config = json.loads(config_file.read_text())
    assert config == {"seeds": ["http://127.0.0.1:9/"], "redisStoreUrl": f"redis://:{PASSWORD}@127.0.0.1:9/3"}
    assert "--redisStoreUrl" not in report["argv"]
    # and the daemon's own limits are untouched
    assert resource.getrlimit(resource.RLIMIT_DATA)[0] != memory


def sleeper(tmp_path: Path) -> list[str]:
    return executable(tmp_path / "sleeper", "#!/bin/sh\nexec sleep 60\n")


def test_an_instance_whose_row_was_never_updated_is_found_and_never_launched_twice(
        settings, tmp_path, cleanup):
    launcher = LocalLauncher(settings, command=sleeper(tmp_path))
    cleanup(launcher)
    spec = make_spec(settings)
    first = launcher.launch(spec)  # ... and the daemon dies before it records `first`

    found = LocalLauncher(settings).find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir)
    assert found is not None and found.running and found.pid == first.pid
    assert (found.ref, found.process_id) == (first.ref, spec.process_id)

    again = launcher.launch(spec)
    assert again.pid == first.pid
    assert [i.pid for i in launcher.list()] == [first.pid]
    assert launcher.find(8, spec.crawl_id, spec.instance, spec.instance_dir) is None


# The launcher in a process of its own, killed by the test hook between spawn and record.
KILLED_AFTER_SPAWN = textwrap.dedent("""\
    import os, signal, sys
    from archiver.conf import Settings
    from runner.launchers import LaunchSpec, LocalLauncher
    from runner.redis_server import RedisEndpoint

    settings = Settings(data_dir=sys.argv[1])
    instance_dir = settings.crawls_dir / "c0ffee" / "0"
    spec = LaunchSpec(crawl_id="c0ffee", instance=0, process_id=7, instance_dir=instance_dir, workers=2,
                      redis=RedisEndpoint(host="127.0.0.1", port=9), db=3, runner_id="r", config={})
    launcher = LocalLauncher(settings, command=[sys.argv[2]],
                             after_spawn=lambda pid: os.kill(os.getpid(), signal.SIGKILL))
    launcher.launch(spec)
""")


def test_a_launcher_killed_right_after_the_spawn_leaves_an_instance_find_and_list_see(
        settings, tmp_path, cleanup):
    command = sleeper(tmp_path)
    (settings.crawls_dir / "c0ffee" / "0").mkdir(parents=True)
    result = subprocess.run([sys.executable, "-c", KILLED_AFTER_SPAWN, str(settings.data_dir), command[0]],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == -9, result.stderr
    launcher = LocalLauncher(settings, command=command)
    cleanup(launcher)
    spec = make_spec(settings)
    meta = json.loads((spec.instance_dir / f"process-{spec.process_id}.json").read_text())
    assert meta["pid"] is None  # the launcher never got to record it

    found = launcher.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir)
    assert found is not None and found.running and found.pid
    (listed,) = launcher.list()
    assert (listed.ref, listed.pid, listed.running) == (found.ref, found.pid, True)
    assert launcher.launch(spec).pid == found.pid  # a relaunch of the row adopts it

    launcher.remove(found.ref)
    assert launcher.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir) is None
    assert processes_mentioning(str(spec.instance_dir)) == []


def test_a_row_recorded_but_never_spawned_is_not_an_instance(settings, tmp_path, cleanup):
    launcher = LocalLauncher(settings, command=sleeper(tmp_path))
    cleanup(launcher)
    spec = make_spec(settings)
    (spec.instance_dir / f"process-{spec.process_id}.json").write_text(
        json.dumps({"crawl_id": spec.crawl_id, "instance": 0, "process_id": spec.process_id, "pid": None}))

    assert launcher.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir) is None
    launched = launcher.launch(spec)
    assert launcher.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir).pid == launched.pid


def test_a_pid_a_crawler_forged_in_its_folder_is_never_signalled(settings, tmp_path, cleanup):
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        launcher = LocalLauncher(settings, command=sleeper(tmp_path))
        spec = make_spec(settings)
        forged = spec.instance_dir / "process-99.json"
        forged.write_text(json.dumps({"crawl_id": "c0ffee", "instance": 0, "process_id": 99,
                                      "pid": bystander.pid}))
        (listed,) = launcher.list()
        assert not listed.running
        launcher.remove(listed.ref)
        assert bystander.poll() is None and not forged.exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_the_local_crawler_command_setting_is_split_and_checked(tmp_path, data_dir):
    command = executable(tmp_path / "my crawler", "#!/bin/sh\nexit 0\n")[0]
    settings = Settings(data_dir=data_dir, local_crawler_command=f"'{command}' --flag 'two words'")
    assert LocalLauncher(settings).command == [command, "--flag", "two words"]
    with pytest.raises(ConfigError, match="ARCHIVER_LOCAL_CRAWLER_COMMAND: /nonexistent/crawler is not"):
        LocalLauncher(Settings(data_dir=data_dir, local_crawler_command="/nonexistent/crawler --x"))
    from archiver.conf import from_environ

    with pytest.raises(ConfigError, match="ARCHIVER_LOCAL_CRAWLER_COMMAND: .*not a command line"):
        from_environ({"ARCHIVER_LOCAL_CRAWLER_COMMAND": "crawler 'unbalanced"})
    assert from_environ({"ARCHIVER_LOCAL_CRAWLER_COMMAND": "a b"}).local_crawler_command == ("a", "b")


def test_the_wrapper_refuses_a_command_line_it_cannot_parse():
    result = subprocess.run([sys.executable, "-I", str(REPO / "runner" / "local_wrapper.py"), "/tmp/x",
                             "--memory", "lots", "--", "true"], capture_output=True, text=True)
    assert result.returncode == 2 and "usage" in result.stderr
    assert not os.path.exists("/tmp/x.exit")


@pytest.mark.parametrize("content", [
    '{"crawl_id": "c0ffee", "instance": "0", "process_id": 9, "pid": 1}',
    '{"crawl_id": ["x"], "instance": 0, "process_id": 9}',
    '{"crawl_id": "c0ffee", "instance": 0, "process_id": 9, "pid": "1; rm -rf /"}',
    "[1, 2]", "not json", "",
])
def test_a_process_file_a_crawler_rewrote_never_breaks_listing(settings, tmp_path, content):
    launcher = LocalLauncher(settings, command=sleeper(tmp_path))
    spec = make_spec(settings)
    (spec.instance_dir / "process-9.json").write_text(content)
    found = launcher.list()
    assert all(not instance.running for instance in found)
    for instance in found:
        launcher.remove(instance.ref)


@pytest.mark.parametrize("plant", ["/dev/zero", "fifo"])
def test_a_log_the_crawler_replaced_is_not_followed_nor_read_forever(settings, tmp_path, plant):
    launcher = LocalLauncher(settings, command=sleeper(tmp_path))
    log = make_spec(settings).instance_dir / "process-7.log"
    if plant == "fifo":
        os.mkfifo(log)  # nobody writes: opening it to read would block
    else:
        log.symlink_to(plant)  # endless: reading it all would never end
    assert launcher.log_tail(str(log.with_suffix(""))) == ""


def test_the_log_tail_is_the_last_lines(settings, tmp_path):
    launcher = LocalLauncher(settings, command=sleeper(tmp_path))
    log = make_spec(settings).instance_dir / "process-7.log"
    log.write_text("".join(f"line {i}\n" for i in range(5000)))
    assert launcher.log_tail(str(log.with_suffix("")), lines=2) == "line 4998\nline 4999"


def test_an_exit_file_the_crawler_replaced_with_a_link_to_an_endless_device_is_no_exit_code(
        settings, tmp_path):
    launcher = LocalLauncher(settings, command=executable(tmp_path / "fast", "#!/bin/sh\nexit 3\n"))
    spec = make_spec(settings)
    launched = launcher.launch(spec)
    assert wait_for_exit(launcher, launched.ref).exit_code == 3
    exit_file = Path(launched.ref).with_suffix(".exit")
    exit_file.unlink()
    exit_file.symlink_to("/dev/zero")
    assert launcher.inspect(launched.ref).exit_code is None
