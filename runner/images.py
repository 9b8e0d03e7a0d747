"""Fetching the crawler image, outside the daemon's loop (`archiver pull`).

The runner never pulls: a pull can take minutes, and its loop must not wait on one (a
missing image is an ImageMissing wait, see runner.launchers.docker). archiver's own image
(archiver/crawler:*) is built on this machine and is never in a registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from archiver.conf import Settings
from archiver.errors import ArchiverError, LaunchError
from runner.launchers.docker import OWN_IMAGE, DockerLauncher

# Seconds a pull's event stream may stay silent (a registry slow to send a layer).
PULL_READ_TIMEOUT = 300


class PullFailed(ArchiverError):
    """The engine could not fetch the image; the message is the engine's reason, one line."""


def is_own_image(image: str) -> bool:
    return image.startswith(OWN_IMAGE)


def pull(settings: Settings, image: str, on_event: Callable[[dict], None]) -> None:
    """Pull `image` onto the engine, passing each of the engine's progress events (dicts with
    `status`, and `id` and `progressDetail` for a layer) to `on_event`."""
    launcher = DockerLauncher(settings, image)
    try:
        launcher.engine_version()  # a bounded first request: an absent engine fails fast
    except LaunchError as exc:
        raise PullFailed(f"cannot pull {image}: {exc}") from exc
    finally:
        launcher.close()
    for event in _events(image):
        if "error" in event:
            raise PullFailed(f"cannot pull {image}: {one_line(event['error'])}")
        on_event(event)


def _events(image: str) -> Iterator[dict]:
    import docker
    import docker.errors
    import requests.exceptions

    client = docker.from_env(timeout=PULL_READ_TIMEOUT)
    try:
        yield from client.api.pull(image, stream=True, decode=True)
    except docker.errors.APIError as exc:
        raise PullFailed(f"cannot pull {image}: {one_line(exc.explanation or str(exc))}") from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise PullFailed(f"cannot pull {image}: the Docker engine stopped answering "
                         f"({type(exc).__name__})") from exc
    finally:
        client.close()


def one_line(text: str) -> str:
    return " ".join(str(text).split())[:300]
