"""Crawler containers on the Docker engine DOCKER_HOST names, with host networking.

Engine calls are bounded as runner.launchers.engine says. `containers.run` is never used:
it pulls a missing image.
"""

from __future__ import annotations

import time
from pathlib import Path

from archiver.errors import EngineUnavailable, LaunchError
from runner.launchers.base import Instance, Launched, LaunchSpec
from runner.launchers.engine import (
    LOG_OPTIONS,
    NOFILE,
    OWN_IMAGE,
    PIDS_LIMIT,
    PROFILE_DIR,
    REDIS_ALIAS,
    STOP_TIMEOUT,
    TMP_BYTES,
    EngineLauncher,
    Limits,
    Prepared,
    folder_user,
    image_fix,
    image_missing,
    install_id,
    labelled_instance,
    profile_mount,
)

__all__ = ["OWN_IMAGE", "PROFILE_DIR", "DockerLauncher", "folder_user", "image_fix", "image_missing",
           "install_id", "profile_mount"]

LIVE_STATES = ("running", "restarting", "paused")
VERSION_WAIT = 30.0  # seconds `archiver doctor` waits for `crawl --version` to exit


class DockerLauncher(EngineLauncher):
    """Containers named and labelled by installation, crawl, instance and Process row."""

    name = "docker"

    # --- launch ---------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Launched:
        prepared = self._prepare(spec)
        container_id = self._create(spec, prepared)
        self._call("start a container", lambda api: api.start(container_id))
        return Launched(ref=container_id, args=prepared.args, container_id=container_id, image=self.image)

    def _create(self, spec: LaunchSpec, prepared: Prepared) -> str:
        """The container's id. Never pulls: a missing image raises ImageMissing. A container
        of the same name (this Process row's, from a launch cut short) is taken over."""
        name = self._name(spec)
        for _ in range(2):
            created = self._create_named(name, spec, prepared)
            if created:
                return created
            existing = self._call("inspect a container", lambda api: api.inspect_container(name))
            if existing["State"]["Status"] != "created":
                return existing["Id"]  # it started: this row's instance, not a second one
            self._call("remove a container", lambda api: api.remove_container(name, force=True))
        raise LaunchError(f"container {name} keeps reappearing unstarted")

    def _create_named(self, name: str, spec: LaunchSpec, prepared: Prepared) -> str:
        """The new container's id; "" when one of that name exists."""
        import docker.errors

        limits = self.limits(spec)
        try:
            return self._call("create a container", lambda api: api.create_container(
                self.image, prepared.args, name=name, hostname=spec.hostname, user=prepared.user,
                detach=True, environment=spec.environment(REDIS_ALIAS if prepared.redis_alias else None), labels=self._labels(spec),
                host_config=self._host_config(api, spec, prepared.redis_alias, limits))["Id"])
        except docker.errors.ImageNotFound as exc:
            raise image_missing(self.image) from exc
        except docker.errors.NotFound as exc:  # e.g. the instance folder vanished
            raise LaunchError(f"Docker cannot create the container: {exc.explanation or exc}") from exc
        except LaunchError as exc:
            if isinstance(exc.__cause__, docker.errors.APIError) and exc.__cause__.status_code == 409:
                return ""
            raise

    @staticmethod
    def _host_config(api, spec: LaunchSpec, redis_alias: bool, limits: Limits):
        from docker.types import LogConfig, Ulimit

        return api.create_host_config(
            network_mode="host", extra_hosts={REDIS_ALIAS: "127.0.0.1"} if redis_alias else None,
            binds=_binds(spec),
            cap_drop=["ALL"], security_opt=["no-new-privileges"], pids_limit=PIDS_LIMIT,
            mem_limit=limits.memory, nano_cpus=limits.nano_cpus, shm_size=limits.shm, read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={TMP_BYTES // 2**20}m"},
            log_config=LogConfig(type="json-file", config=LOG_OPTIONS),
            ulimits=[Ulimit(name="nofile", soft=NOFILE, hard=NOFILE)],
        )

    # --- observe --------------------------------------------------------------------------

    def find(self, process_id: int, crawl_id: str, instance: int, instance_dir: Path) -> Instance | None:
        """By the container's labels. A container created but never started (the launch was
        cut between the two calls) is removed: launching again is then safe."""
        labels = self._find_labels(process_id, crawl_id, instance)
        found = None
        for summary in self._call("list containers", lambda api: api.containers(
                all=True, filters={"label": labels})):
            if summary.get("State") == "created":
                self.remove(summary["Id"])
            elif found is None or summary.get("State") in LIVE_STATES:
                found = summary
        return self.inspect(found["Id"]) if found else None

    def inspect(self, ref: str) -> Instance | None:
        import docker.errors

        if not ref:
            return None
        try:
            attrs = self._call("inspect a container", lambda api: api.inspect_container(ref))
        except docker.errors.NotFound:
            return None
        return _instance(attrs["Id"], attrs["Config"].get("Labels") or {}, attrs.get("State", {}))

    def list(self) -> list[Instance]:
        """One request for the list, one more per container that is no longer running (for its
        exit code); the whole stays within one timeout past the first request's start."""
        import docker.errors

        deadline = time.monotonic() + self.timeout
        summaries = self._call("list containers", lambda api: api.containers(
            all=True, filters={"label": f"archiver.install={self.install}"}))
        found = []
        for summary in summaries:
            labels, state = summary.get("Labels") or {}, summary.get("State", "")
            if state in LIVE_STATES or state == "created":
                found.append(_instance(summary["Id"], labels, {"Status": state}))
                continue
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"Docker engine too slow (listing took over {self.timeout:g} s)")
            try:
                attrs = self._call("inspect a container",
                                   lambda api, ref=summary["Id"]: api.inspect_container(ref))
            except docker.errors.NotFound:
                continue  # removed meanwhile
            found.append(_instance(attrs["Id"], labels, attrs.get("State", {})))
        return found

    def remove(self, ref: str) -> None:
        import docker.errors

        if not ref:
            return
        try:
            # Stopping a stopped container is a no-op; the request waits for STOP_TIMEOUT
            # on top of the engine timeout, then the engine kills the crawler.
            self._call("stop a container", lambda api: api.stop(ref, timeout=STOP_TIMEOUT))
            self._call("remove a container", lambda api: api.remove_container(ref, force=True))
        except docker.errors.NotFound:
            pass

    def log_tail(self, ref: str, lines: int = 20) -> str:
        import docker.errors

        try:
            return self._call("read logs", lambda api: api.logs(ref, tail=lines)).decode(errors="replace")
        except docker.errors.NotFound:
            return ""

    def crawler_version(self) -> str:
        """For `archiver doctor`: the first line `crawl --version` prints in a throwaway
        container (no network, no mounts); "" when it prints nothing or does not exit within
        the timeout."""
        container = self._call("create a container", lambda api: api.create_container(
            self.image, ["crawl", "--version"],
            host_config=api.create_host_config(network_mode="none", cap_drop=["ALL"]))["Id"])
        try:
            self._call("start a container", lambda api: api.start(container))
            # Not the API timeout: this waits for a program to start in a container (a
            # Python interpreter or Node), seconds on a busy host; "unknown" would mislead.
            self._call("wait for a container", lambda api: api.wait(container, timeout=max(self.timeout, VERSION_WAIT)))
            output = self._call("read logs", lambda api: api.logs(container, stderr=False))
        except EngineUnavailable:
            return ""
        finally:
            self.remove(container)
        lines = output.decode(errors="replace").strip().splitlines()
        return lines[0].strip()[:100] if lines else ""


def _binds(spec: LaunchSpec) -> dict:
    """The instance folder, and the crawl's browser profile (one file, read-only) if any."""
    binds = {str(spec.instance_dir): {"bind": "/crawls", "mode": "rw"}}
    if spec.profile:
        binds[str(spec.profile)] = {"bind": profile_mount(spec), "mode": "ro"}
    return binds


def _instance(container_id: str, labels: dict, state: dict) -> Instance:
    """A container as an Instance; one created but never started has ended without a code."""
    running = state.get("Status") in LIVE_STATES
    code = None if state.get("Status") == "created" else state.get("ExitCode")
    return labelled_instance(container_id, labels, running, code, oom=bool(state.get("OOMKilled")))
