"""Where crawler instances run: Docker containers, Swarm services or local processes.

A Launcher starts one instance from a LaunchSpec and answers for it by a `ref` (a
container id, a service id, or the path prefix of a local process's files). Everything it starts
carries the crawl id, the instance number, the Process row and this installation, so a
restarted daemon finds its instances again (`find()`, even for a launch it was killed in)
and never touches another installation's. The in-memory FakeLauncher is in tests/fakes.py.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import ConfigError
from runner.launchers.base import (
    CONFIG_NAME,
    Instance,
    Launched,
    Launcher,
    LaunchSpec,
    hostname,
    write_crawler_config,
)
from runner.launchers.docker import DockerLauncher, image_missing, install_id
from runner.launchers.local import LocalLauncher, crawler_command
from runner.launchers.swarm import SwarmLauncher

__all__ = [
    "CONFIG_NAME", "DockerLauncher", "Instance", "LaunchSpec", "Launched", "Launcher", "LocalLauncher",
    "SwarmLauncher", "crawler_command", "hostname", "image_missing", "install_id", "make_launcher",
    "write_crawler_config",
]

log = logging.getLogger(__name__)


def make_launcher(settings: Settings) -> Launcher:
    """The launcher ARCHIVER_LAUNCHER asks for; `auto` takes Docker when it can run the image
    (never Swarm: services are asked for by name)."""
    if settings.launcher == "local":
        return LocalLauncher(settings)
    if settings.launcher == "swarm":
        swarm = SwarmLauncher(settings)
        swarm.check()
        return swarm
    docker = DockerLauncher(settings)
    if settings.launcher == "docker":
        return docker
    if not _docker_sdk_configured():
        log.info("launcher: local (no Docker engine configured)")
        return LocalLauncher(settings)
    if not docker.ping():
        log.info("launcher: local (the Docker engine does not answer)")
        return LocalLauncher(settings)
    if not docker.has_image():
        log.info("launcher: local (%s)", image_missing(docker.image))
        return LocalLauncher(settings)
    log.info("launcher: docker (engine answers, image %s present)", docker.image)
    return docker


def _docker_sdk_configured() -> bool:
    try:
        import docker  # noqa: F401
    except ImportError as exc:
        raise ConfigError("the docker package is missing from this environment") from exc
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()
