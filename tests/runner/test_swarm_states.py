"""How the Swarm launcher reads a service's tasks (no engine: the engine's own answers are in
tests/runner/test_swarm.py): every task state maps to a running or an ended instance."""

from __future__ import annotations

import pytest

from archiver.conf import Settings
from runner.launchers import SwarmLauncher
from runner.launchers.swarm import newest

SERVICE = {"ID": "svc1", "Spec": {"Labels": {"archiver.crawl": "c0ffee", "archiver.instance": "1",
                                             "archiver.process": "42"}}}


def task(state: str, code: int | None = None, created: str = "2030-01-01T00:00:00Z", node: str = "n1") -> dict:
    status = {"State": state}
    if code is not None:
        status["ContainerStatus"] = {"ContainerID": "c1", "ExitCode": code}
    return {"ServiceID": "svc1", "NodeID": node, "CreatedAt": created, "Status": status}


@pytest.fixture
def launcher(tmp_path) -> SwarmLauncher:
    launcher = SwarmLauncher(Settings(data_dir=tmp_path, launcher="swarm"))
    launcher._node_id = "elsewhere"  # no engine asked: the tasks here run on other nodes
    return launcher


@pytest.mark.parametrize("state", ["new", "allocated", "pending", "assigned", "accepted", "preparing",
                                   "ready", "starting", "running"])
def test_a_task_not_yet_ended_is_a_running_instance(launcher, state):
    instance = launcher._instance(SERVICE, [task(state, code=0)])
    assert instance.running and instance.exit_code is None
    assert (instance.ref, instance.crawl_id, instance.instance, instance.process_id) == ("svc1", "c0ffee", 1, 42)


@pytest.mark.parametrize(("state", "code"), [("complete", 0), ("failed", 4), ("failed", 137), ("shutdown", 13)])
def test_a_task_whose_container_ran_ended_with_its_exit_code(launcher, state, code):
    instance = launcher._instance(SERVICE, [task(state, code=code)])
    assert not instance.running and instance.exit_code == code and not instance.oom


@pytest.mark.parametrize("state", ["rejected", "orphaned", "remove", "failed"])
def test_a_task_that_never_ran_a_container_vanished(launcher, state):
    instance = launcher._instance(SERVICE, [task(state)])
    assert not instance.running and instance.exit_code is None


def test_a_failed_task_is_never_read_as_a_clean_exit(launcher):
    instance = launcher._instance(SERVICE, [task("failed", code=0)])
    assert not instance.running and instance.exit_code is None


def test_a_service_whose_task_is_not_made_yet_is_starting(launcher):
    assert launcher._instance(SERVICE, []).running


def test_the_newest_task_stands_for_the_service_and_a_live_one_first():
    old, new = task("failed", 1, created="2030-01-01T00:00:00Z"), task("complete", 0, created="2030-01-02T00:00:00Z")
    assert newest([new, old]) is new
    live = task("running", created="2029-12-31T00:00:00Z")
    assert newest([old, live, new]) is live
    assert newest([]) is None


def test_constraints_are_the_installations_then_the_orgs(tmp_path):
    settings = Settings(data_dir=tmp_path, swarm_constraints=("node.role!=manager",),
                        swarm_org_constraints={"press": ("node.labels.zone==eu",)})
    launcher = SwarmLauncher(settings)
    assert launcher.constraints("press") == ["node.role!=manager", "node.labels.zone==eu"]
    assert launcher.constraints("other") == ["node.role!=manager"]
