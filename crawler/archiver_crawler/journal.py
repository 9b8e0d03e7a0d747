"""The journal of outcomes Redis could not take (`<collection>/unrecorded.jsonl`).

Redis went away between archiving a page and recording it: the outcome is kept on disk, so
the relaunched instance records it instead of fetching (and archiving) the page again, and
an instance that exits meanwhile does not hand those pages back to the queue.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from archiver_crawler.state import Outcome, QueueEntry

logger = logging.getLogger(__name__)
UNRECORDED = "unrecorded.jsonl"


def journaled_urls(collection_dir: Path) -> list[str]:
    """The URLs of the outcomes journaled in `collection_dir`: archived already, so an
    instance that exits must not hand them back to the queue."""
    try:
        lines = (collection_dir / UNRECORDED).read_text().splitlines()
    except OSError:
        return []
    urls = []
    for line in lines:
        try:
            urls.append(str(json.loads(line)["url"]))
        except (ValueError, KeyError, TypeError):
            continue
    return urls


def save(collection_dir: Path, outcome: Outcome, owner: str | None = None) -> None:
    """Keep `outcome`; `owner` holds its page in `:p` (one process of the instance, or None:
    the instance), whose outcome the next session records in its name."""
    line = json.dumps({"url": outcome.url, "page": outcome.page, "record": outcome.record,
                       "failed": outcome.failed, "links": [e.to_json() for e in outcome.links],
                       "assets": list(outcome.assets), "owner": owner})
    try:
        # One write with O_APPEND: the processes of an instance (procs.py) share the file.
        fd = os.open(collection_dir / UNRECORDED, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:
        logger.warning("could not keep %s for the next session (%s); it will be fetched again",
                       outcome.url, exc)


def saved(collection_dir: Path) -> list[Outcome] | None:
    """The journaled outcomes (damaged lines skipped), or None when there is no journal."""
    try:
        lines = (collection_dir / UNRECORDED).read_text().splitlines()
    except OSError:
        return None
    outcomes = []
    for line in lines:
        try:
            data = json.loads(line)
            outcomes.append(Outcome(
                url=str(data["url"]), page=data.get("page"), record=data.get("record"),
                failed=data.get("failed"), assets=tuple(str(a) for a in data.get("assets", [])),
                links=tuple(QueueEntry.from_json(raw) for raw in data.get("links", [])),
                owner=data.get("owner") or None))
        except (ValueError, KeyError, TypeError):
            continue
    return outcomes


def forget(collection_dir: Path) -> None:
    (collection_dir / UNRECORDED).unlink(missing_ok=True)
