"""Crawler instances as Docker Swarm services, created through the manager DOCKER_HOST names.

One service per instance (per Process row): one replica, restart condition `none` (archiver's
own relaunch policy decides what an exit means), host networking (the `host` network), the
container launcher's labels, limits, hardening, user (the instance folder's owner) and
browser profile (mounted read-only), and resource reservations equal to the limits so that
Swarm places it on a node with room. Its state and exit code are its task's.
Engine calls are bounded as runner.launchers.engine says.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import ConfigError, EngineUnavailable, LaunchError
from runner.launchers.base import Instance, Launched, LaunchSpec
from runner.launchers.engine import (
    LOG_OPTIONS,
    NOFILE,
    PIDS_LIMIT,
    REDIS_ALIAS,
    STOP_TIMEOUT,
    TMP_BYTES,
    EngineLauncher,
    Host,
    Limits,
    Prepared,
    image_missing,
    labelled_instance,
    profile_mount,
)

log = logging.getLogger(__name__)

# Task states (docs.docker.com: swarm task states). Until one of the ended ones, the task
# counts as a running instance: `pending` included (no node has room yet; log_tail says why).
LIVE_TASK_STATES = frozenset({"new", "allocated", "pending", "assigned", "accepted", "preparing",
                              "ready", "starting", "running"})
# The container ran and exited: its exit code is the crawler's. `rejected` (it never started:
# no image on the node, no such folder there), `orphaned` (its node is gone) and `remove`
# have none: the instance vanished.
RAN_TASK_STATES = frozenset({"complete", "failed", "shutdown"})
OOM_EXIT = 137  # SIGKILL: the task status does not say whether the kernel's OOM killer sent it
# Swarm on Docker API < 1.46 has no per-service no-new-privileges (older engines ignore the
# field): util-linux's setpriv sets it and then executes the image's own entrypoint.
NO_NEW_PRIVS = ["setpriv", "--no-new-privs"]


class SwarmLauncher(EngineLauncher):
    """Services named and labelled by installation, crawl, instance and Process row."""

    name = "swarm"

    def __init__(self, settings: Settings, image: str | None = None):
        super().__init__(settings, image)
        self._node_id: str | None = None  # this engine's node: its containers can be reached here

    def check(self) -> None:
        """At start-up: refuse an engine that answers but is not a Swarm manager. One that
        does not answer is a wait, as for every other call."""
        try:
            swarm = self._call("read the engine's state", lambda api: api.info()).get("Swarm") or {}
        except LaunchError as exc:
            log.warning("launcher swarm: cannot ask the engine whether it is a Swarm manager: %s", exc)
            return
        if not swarm.get("ControlAvailable"):
            raise ConfigError(
                "ARCHIVER_LAUNCHER=swarm: the Docker engine DOCKER_HOST names is not a Swarm manager "
                f"(its swarm state is {swarm.get('LocalNodeState') or 'unknown'!r}); run `docker swarm init` "
                "there or point DOCKER_HOST at a manager")
        self._node_id = swarm.get("NodeID") or None

    # --- launch ---------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Launched:
        prepared = self._prepare(spec)
        image_id, entrypoint = self._image()
        service_id = self._create(spec, prepared, image_id, entrypoint)
        return Launched(ref=service_id, args=prepared.args, container_id=service_id, image=self.image)

    def _image(self) -> tuple[str, list[str]]:
        """The image's id and entrypoint on the manager. The service names the image by id:
        a node never pulls an image named by id (it would pull a tag from its registry at every
        task start), and every node runs that very build or none (the task is rejected)."""
        import docker.errors

        try:
            attrs = self._call("find the image", lambda api: api.inspect_image(self.image))
        except docker.errors.NotFound as exc:
            raise image_missing(self.image) from exc
        return attrs["Id"], list((attrs.get("Config") or {}).get("Entrypoint") or [])

    def _create(self, spec: LaunchSpec, prepared: Prepared, image_id: str, entrypoint: list[str]) -> str:
        """The new service's id, or that of this Process row's service when a launch cut short
        (its reply lost, or a kill -9 before the row was updated) had created it already."""
        import docker.errors
        from docker.types import ServiceMode

        name = self._name(spec)
        template = self._task_template(spec, prepared, image_id, entrypoint)
        try:
            return self._call("create a service", lambda api: api.create_service(
                template, name=name, labels=self._labels(spec), mode=ServiceMode("replicated", replicas=1)))["ID"]
        except LaunchError as exc:
            if not (isinstance(exc.__cause__, docker.errors.APIError) and exc.__cause__.status_code == 409):
                raise
        try:
            return self._call("inspect a service", lambda api: api.inspect_service(name))["ID"]
        except docker.errors.NotFound as exc:
            raise LaunchError(f"service {name} was reported to exist, then vanished") from exc

    def _task_template(self, spec: LaunchSpec, prepared: Prepared, image_id: str, entrypoint: list[str]):
        limits = self.limits(spec)
        from docker.types import (
            ContainerSpec,
            Placement,
            Resources,
            RestartPolicy,
            TaskTemplate,
        )

        container = ContainerSpec(
            image_id, command=[*NO_NEW_PRIVS, *entrypoint], args=prepared.args, hostname=spec.hostname,
            env=spec.environment(REDIS_ALIAS if prepared.redis_alias else None), user=prepared.user,
            read_only=True, cap_drop=["ALL"],
            hosts={REDIS_ALIAS: "127.0.0.1"} if prepared.redis_alias else None,
            # Swarm's tmpfs mounts are nosuid, nodev and noexec already.
            mounts=_mounts(spec, limits),
            stop_grace_period=STOP_TIMEOUT * 10**9,
        )
        # API fields the SDK has no argument for: ulimits (API 1.41) and no-new-privileges
        # (honoured from API 1.46; setpriv above covers older engines).
        container["Ulimits"] = [{"Name": "nofile", "Soft": NOFILE, "Hard": NOFILE}]
        container["Privileges"] = {"NoNewPrivileges": True}
        cpus, memory = limits.nano_cpus, limits.memory
        resources = Resources(cpu_limit=cpus, mem_limit=memory, cpu_reservation=cpus, mem_reservation=memory)
        resources["Limits"]["Pids"] = PIDS_LIMIT
        constraints = self.constraints(spec.org)
        return TaskTemplate(
            container, resources=resources, restart_policy=RestartPolicy(condition="none"),
            placement=Placement(constraints=constraints) if constraints else None,
            log_driver={"Name": "json-file", "Options": LOG_OPTIONS}, networks=["host"],
        )

    def _read_host(self) -> Host | None:
        """The largest node's CPUs and memory: a task runs on one node, and Swarm refuses
        nothing at creation (a task no node can take stays pending)."""
        nodes = self._call("list nodes", lambda api: api.nodes())
        hosts = [_node_host(node) for node in nodes]
        return max((h for h in hosts if h), key=lambda h: (h.cpus, h.memory), default=None)

    def constraints(self, org: str) -> list[str]:
        """ARCHIVER_SWARM_CONSTRAINTS, then those ARCHIVER_SWARM_ORG_CONSTRAINTS gives the org."""
        return [*self.settings.swarm_constraints, *self.settings.swarm_org_constraints.get(org, ())]

    # --- observe --------------------------------------------------------------------------

    def find(self, process_id: int, crawl_id: str, instance: int, instance_dir: Path) -> Instance | None:
        """By the service's labels (a Swarm service is started as it is created: there is no
        half-launched state to clear)."""
        labels = self._find_labels(process_id, crawl_id, instance)
        services = self._call("list services", lambda api: api.services(filters={"label": labels}))
        return self.inspect(services[0]["ID"]) if services else None

    def inspect(self, ref: str) -> Instance | None:
        import docker.errors

        if not ref:
            return None
        try:
            service = self._call("inspect a service", lambda api: api.inspect_service(ref))
            tasks = self._call("list a service's tasks", lambda api: api.tasks(filters={"service": ref}))
        except docker.errors.NotFound:
            return None
        return self._instance(service, tasks)

    def list(self) -> list[Instance]:
        """Two requests (services, then their tasks: tasks match their service's labels), and
        one more per task killed by SIGKILL on this node (was it the OOM killer?); the whole
        stays within one timeout past the first request's start."""
        deadline = time.monotonic() + self.timeout
        label = f"archiver.install={self.install}"
        services = self._call("list services", lambda api: api.services(filters={"label": label}))
        if not services:
            return []
        tasks = self._call("list tasks", lambda api: api.tasks(filters={"label": label}))
        by_service: dict[str, list[dict]] = {}
        for task in tasks:
            by_service.setdefault(task.get("ServiceID", ""), []).append(task)
        return [self._instance(service, by_service.get(service["ID"], []), deadline) for service in services]

    def _instance(self, service: dict, tasks: list[dict], deadline: float | None = None) -> Instance:
        """A service as an Instance: its newest task's state (a service whose task the
        orchestrator has not made yet is starting, so running)."""
        labels = (service.get("Spec") or {}).get("Labels") or {}
        task = newest(tasks)
        if task is None:
            return labelled_instance(service["ID"], labels, running=True, exit_code=None)
        status = task.get("Status") or {}
        state = status.get("State", "")
        container = status.get("ContainerStatus") or {}
        code = container.get("ExitCode") if state in RAN_TASK_STATES and container.get("ContainerID") else None
        if state == "failed" and code == 0:
            code = None  # its container never ran to an exit: a 0 here would read as "done"
        oom = code == OOM_EXIT and self._oom_killed(task, deadline)
        return labelled_instance(service["ID"], labels, state in LIVE_TASK_STATES, code, oom)

    def _oom_killed(self, task: dict, deadline: float | None) -> bool:
        """Whether the OOM killer ended the task's container: known only for containers on this
        engine's own node (elsewhere a 137 counts as a crash, which is relaunched all the same)."""
        import docker.errors

        container_id = task["Status"]["ContainerStatus"]["ContainerID"]
        if not self._is_local(task):
            return False
        if deadline is not None and time.monotonic() > deadline:
            raise EngineUnavailable(f"Docker engine too slow (listing took over {self.timeout:g} s)")
        try:
            attrs = self._call("inspect a container", lambda api: api.inspect_container(container_id))
        except docker.errors.NotFound:
            return False
        return bool(attrs.get("State", {}).get("OOMKilled"))

    def _is_local(self, task: dict) -> bool:
        if self._node_id is None:
            swarm = self._call("read the engine's state", lambda api: api.info()).get("Swarm") or {}
            self._node_id = swarm.get("NodeID") or ""
        return bool(self._node_id) and task.get("NodeID") == self._node_id

    # --- remove, logs ---------------------------------------------------------------------

    def remove(self, ref: str) -> None:
        """A task running on this engine's node is stopped first (SIGTERM, SIGKILL after
        STOP_TIMEOUT, waited for, as the container launcher does); removing the service then
        removes its containers. On another node the manager stops it after the service is
        removed, with the same grace period, without this call waiting for it."""
        import docker.errors

        if not ref:
            return
        try:
            for task in self._call("list a service's tasks", lambda api: api.tasks(filters={"service": ref})):
                container_id = ((task.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID")
                if container_id and task["Status"].get("State") in LIVE_TASK_STATES and self._is_local(task):
                    self._stop_container(container_id)
            self._call("remove a service", lambda api: api.remove_service(ref))
        except docker.errors.NotFound:
            pass

    def _stop_container(self, container_id: str) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):  # it ended and went meanwhile
            self._call("stop a container", lambda api: api.stop(container_id, timeout=STOP_TIMEOUT))

    def log_tail(self, ref: str, lines: int = 20) -> str:
        """The end of the crawler's output, and why Swarm ended or holds its task (a task that
        never started has no output: "no suitable node", "No such image", a missing folder)."""
        import docker.errors

        try:
            output = self._call("read logs", lambda api: b"".join(api.service_logs(
                ref, stdout=True, stderr=True, tail=lines))).decode(errors="replace")
            task = newest(self._call("list a service's tasks", lambda api: api.tasks(filters={"service": ref})))
        except docker.errors.NotFound:
            return ""
        status = (task or {}).get("Status") or {}
        if status.get("Err"):
            if output and not output.endswith("\n"):
                output += "\n"
            output += f"swarm task {status.get('State')}: {status['Err']}\n"
        return output


def _mounts(spec: LaunchSpec, limits: Limits) -> list:
    """The instance folder, /tmp, /dev/shm (a service has no shm size of its own), and the
    crawl's browser profile (one file, read-only) if any. Both paths must exist on the node
    the task lands on, as for every bind mount."""
    from docker.types import Mount

    mounts = [Mount("/crawls", str(spec.instance_dir), type="bind"),
              Mount("/tmp", None, type="tmpfs", tmpfs_size=TMP_BYTES),
              Mount("/dev/shm", None, type="tmpfs", tmpfs_size=limits.shm)]
    if spec.profile:
        mounts.append(Mount(profile_mount(spec), str(spec.profile), type="bind", read_only=True))
    return mounts


def _node_host(node: dict) -> Host | None:
    resources = ((node.get("Description") or {}).get("Resources")) or {}
    cpus, memory = resources.get("NanoCPUs"), resources.get("MemoryBytes")
    if not isinstance(cpus, int) or not isinstance(memory, int) or cpus <= 0 or memory <= 0:
        return None
    return Host(cpus=cpus / 1e9, memory=memory)


def newest(tasks: list[dict]) -> dict | None:
    """The task that stands for the service: a live one, else the last one made."""
    if not tasks:
        return None
    return max(tasks, key=lambda task: ((task.get("Status") or {}).get("State") in LIVE_TASK_STATES,
                                        task.get("CreatedAt", "")))
