"""User actions: the one way the CLI, the admin and the API change a crawl (or a delivery).

Each action is a plain function. It validates, writes through the model's own methods,
nudges the local runner when the change is something the runner should act on, and says
what happened in a `Done`. A refusal is always an `ActionRefused` carrying the sentence
people read; its `kind` says whether the state, the input or storage refused it. So no
interface can take another path into the state machine, nor word the same refusal
differently. Finding the crawl (an id prefix, among the rows a caller may see) and parsing
input (options, forms, JSON bodies) stay with each interface.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Sum

from archiver import conf
from archiver.errors import ActionRefused, ConfigError, NotAllowed
from crawls import wake
from crawls.config import CrawlConfig
from crawls.lease import db_now
from crawls.models import (
    MAX_SCALE,
    Collection,
    Crawl,
    CrawlStatus,
    Org,
    Required,
    WebhookDelivery,
    check_deletable,
)
from crawls.models.statuses import said
from crawls.retention import delete_all_files
from crawls.rules import MAX_REGEXES, MAX_TAGS, check_regex, clean_tags, shown
from crawls.storage import StorageError

log = logging.getLogger(__name__)

__all__ = [
    "ActionRefused", "Done", "add", "add_exclusion", "add_to_collection", "cancel", "check_tags",
    "close_collection_link", "create_collection", "delete", "delete_collection",
    "describe_collection", "edit",
    "find_collection", "open_collection_link", "remove_from_collection",
    "one_nudge", "pause", "remove_exclusion", "replay_delivery", "resume", "retry",
    "retry_failed_pages", "scale", "stop",
]


@dataclass(frozen=True)
class Done:
    """What an action did: `message` is the sentence the CLI prints and the API answers."""

    crawl: Crawl
    message: str
    count: int = 0  # the pages a failed-pages retry queued, the files a delete removed


@contextmanager
def refused(kind: str = ActionRefused.STATE) -> Iterator[None]:
    """The model's refusals (NotAllowed, ConfigError) as the one error type of actions."""
    try:
        yield
    except NotAllowed as exc:
        raise ActionRefused(str(exc), kind) from None
    except ConfigError as exc:
        raise ActionRefused(str(exc), ActionRefused.INVALID) from None


# The nudges held back by one_nudge(), or None outside it.
held_nudges: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "held_nudges", default=None)


@contextmanager
def one_nudge() -> Iterator[None]:
    """Actions inside nudge the runner once, when the block ends: after a bulk action, or
    after the commit of a transaction opened inside (before it, the runner finds nothing)."""
    token = held_nudges.set([])
    try:
        yield
    finally:
        wanted = held_nudges.get()
        held_nudges.reset(token)
        if wanted:
            nudge()  # an enclosing block, if any, holds it in turn


def nudge() -> None:
    """Wake the local runner now, or once one_nudge()'s block ends."""
    held = held_nudges.get()
    if held is None:
        wake.nudge()
    else:
        held.append(True)


# --- adding and editing ------------------------------------------------------------------------


def check_tags(tags: list[str]) -> list[str]:
    """The same rules as every tag list (crawls.rules.Tags), named as `archiver add --tag`."""
    if len(tags) > MAX_TAGS:
        raise ActionRefused(f"--tag: at most {MAX_TAGS} tags", ActionRefused.INVALID)
    try:
        return clean_tags(tags)
    except ValueError as exc:
        raise ActionRefused(f"--tag: {exc}", ActionRefused.INVALID) from None


def add(org: Org, config: CrawlConfig, tags: list[str], now: dt.datetime | None = None) -> Crawl:
    """Queue a crawl of `config` for `org`, and wake the runner to start it."""
    tags = check_tags(tags)
    with refused():  # a browser profile the org lacks
        crawl = Crawl.create(org, config, tags=tags, now=now or db_now())
    nudge()
    return crawl


def edit(crawl: Crawl, org: Org, config: CrawlConfig, tags: list[str],
         now: dt.datetime | None = None) -> Done:
    """Give a crawl that has not started yet another org, configuration and tags."""
    with refused():
        crawl.reconfigure(org, config, check_tags(tags), now or db_now())
    nudge()
    return Done(crawl, f"changed crawl {crawl.short_id}")


# --- transitions (at once where nothing runs yet, else recorded for the runner) ----------------


def pause(crawl: Crawl, now: dt.datetime | None = None) -> Done:
    """Pause a crawl, keeping its queue; the runner pauses one that is running."""
    with refused():
        crawl.pause(now or db_now())
    nudge()
    if crawl.status == CrawlStatus.PAUSED:
        return Done(crawl, f"paused {crawl.short_id}")
    return Done(crawl, f"pause requested; the runner will pause {crawl.short_id}")


def resume(crawl: Crawl, now: dt.datetime | None = None) -> Done:
    """Queue a paused crawl again, or withdraw a pause the runner has not carried out."""
    with refused():
        crawl.resume(now or db_now())
    nudge()
    if crawl.status == CrawlStatus.QUEUED:
        return Done(crawl, f"resumed {crawl.short_id}: queued")
    return Done(crawl, f"pause request withdrawn; {crawl.short_id} keeps running")


def stop(crawl: Crawl, now: dt.datetime | None = None) -> Done:
    """End a crawl gracefully, keeping what it archived (one that never ran is canceled)."""
    with refused():
        crawl.stop(now or db_now())
    nudge()
    if crawl.status == CrawlStatus.CANCELED:
        return Done(crawl, f"canceled {crawl.short_id}: it had not started, so there is nothing to keep")
    return Done(crawl, f"stop requested; the runner will stop {crawl.short_id} and keep its archive")


def cancel(crawl: Crawl, now: dt.datetime | None = None) -> Done:
    """End a crawl at once: its crawlers are removed and its partial files discarded."""
    with refused():
        crawl.cancel(now or db_now())
    nudge()
    if crawl.status == CrawlStatus.CANCELED:
        return Done(crawl, f"canceled {crawl.short_id}")
    return Done(crawl, f"cancel requested; the runner will cancel {crawl.short_id}")


def retry(crawl: Crawl, now: dt.datetime | None = None) -> Done:
    """Queue a failed or canceled crawl again, as a new attempt."""
    with refused():
        crawl.retry(now or db_now())
    nudge()
    return Done(crawl, f"queued {crawl.short_id} again (attempt {crawl.attempts})")


def retry_failed_pages(crawl: Crawl, now: dt.datetime | None = None) -> Done:
    """Queue a finished crawl again for only the pages it failed on, into the same archive."""
    with refused():
        count = crawl.retry_failed_pages(now or db_now())
    nudge()
    return Done(crawl, f"queued {crawl.short_id} again for its {count} failed page(s) "
                       f"(attempt {crawl.attempts})", count)


# --- changing an active crawl --------------------------------------------------------------------


def scale(crawl: Crawl, instances: int, now: dt.datetime | None = None) -> Done:
    """Ask for `instances` crawler instances (1 to MAX_SCALE); the runner adjusts."""
    before = crawl.scale
    with refused(ActionRefused.STATE if 1 <= instances <= MAX_SCALE else ActionRefused.INVALID):
        crawl.set_scale(instances, now or db_now())
    nudge()
    return Done(crawl, f"crawl {crawl.short_id}: scale {before} → {instances}")


def add_exclusion(crawl: Crawl, regex: str, now: dt.datetime | None = None) -> Done:
    """Stop crawling URLs matching `regex`: kept in the config, sent to running instances."""
    valid_regex(regex)
    # CrawlConfig takes at most MAX_REGEXES: one more and the crawl's config would not load.
    if len(crawl.config.get("exclude", [])) >= MAX_REGEXES:
        raise ActionRefused(f"crawl {crawl.short_id} already has {MAX_REGEXES} exclusions")
    with refused():
        crawl.change_exclusion(regex, now or db_now())
    nudge()
    return Done(crawl, f"crawl {crawl.short_id} excludes {shown(regex)}{sent_live(crawl)}")


def remove_exclusion(crawl: Crawl, regex: str, now: dt.datetime | None = None) -> Done:
    """Crawl URLs matching `regex` again: removed from the config and from running instances."""
    valid_regex(regex)
    with refused():
        crawl.change_exclusion(regex, now or db_now(), remove=True)
    nudge()
    return Done(crawl, f"crawl {crawl.short_id} no longer excludes {shown(regex)}{sent_live(crawl)}")


def valid_regex(regex: str) -> None:
    try:
        check_regex(regex)
    except ValueError as exc:
        raise ActionRefused(str(exc), ActionRefused.INVALID) from None


def sent_live(crawl: Crawl) -> str:
    return " (sent to its running instances)" if crawl.has_runtime else ""


# --- deleting --------------------------------------------------------------------------------------


def delete(crawl: Crawl, settings: conf.Settings | None = None) -> Done:
    """Delete a final crawl: its files, then its rows if it is still final.

    Active crawls are refused: a crawler may still write to their folder. Files go first,
    objects from their bucket and files on disk through retention's guards (inside the
    data dir, never through a symbolic link); a crawl retried meanwhile keeps its rows (its
    files may be gone, as with retention; the runner writes new ones).
    """
    if not crawl.is_final:
        raise ActionRefused(f"cannot delete crawl {crawl.short_id}: {said(crawl.status)}",
                            advice="stop or cancel it first")
    try:
        check_deletable(crawl)
    except Required as exc:
        raise ActionRefused(str(exc), advice="delete those crawls first") from None
    try:
        paths = delete_all_files(crawl, settings or conf.get())
    except (OSError, StorageError) as exc:
        raise ActionRefused(f"could not delete the files of crawl {crawl.short_id}: {exc}",
                            ActionRefused.UNAVAILABLE) from None
    if not delete_rows(crawl):
        status = Crawl.objects.filter(pk=crawl.pk).values_list("status", flat=True).first()
        raise ActionRefused(f"cannot delete crawl {crawl.short_id}: "
                            f"{said(status) if status else 'it is deleted'}",
                            advice="it changed while its files were deleted")
    log.info("deleted crawl %s (%s) and %d file(s)", crawl.short_id, crawl.status, len(paths))
    return Done(crawl, f"deleted crawl {crawl.short_id} and {len(paths)} file(s)", len(paths))


def delete_rows(crawl: Crawl) -> bool:
    """The crawl's rows, if it is still final; its archive bytes leave its org's total."""
    with transaction.atomic():
        size = crawl.files.aggregate(n=Sum("size"))["n"] or 0
        deleted, _ = Crawl.objects.filter(pk=crawl.pk, status__in=CrawlStatus.FINAL).delete()
        if deleted:
            Org(pk=crawl.org_id).add_bytes(-size)
    return bool(deleted)


# --- webhook deliveries ----------------------------------------------------------------------------


def replay_delivery(delivery: WebhookDelivery, now: dt.datetime | None = None) -> str:
    """Deliver a failed delivery again, from scratch; what happened, in words."""
    with refused():  # only a failed delivery is replayed
        delivery.replay(now or db_now())
    nudge()
    return f"delivery {delivery.pk} is pending again"


# --- collections (issue 24) ------------------------------------------------------------------------


def find_collection(collections, name: str) -> Collection:
    """The collection named `name` (or with that slug) among `collections`, those a caller
    may see; refused (invalid) when there is none."""
    found = collections.select_related("org").filter(name=name).first() or \
        collections.select_related("org").filter(slug=name).first()
    if found is None:
        raise ActionRefused(f"no collection {name!r}", ActionRefused.INVALID,
                            advice="see `archiver collection list`")
    return found


def create_collection(org: Org, name: str, description: str = "", now: dt.datetime | None = None) -> Collection:
    with refused(ActionRefused.INVALID):
        return Collection.create(org, name, description, now=now or db_now())


def describe_collection(collection: Collection, description: str) -> str:
    collection.describe(description)
    return f"collection {collection.name!r}: description changed"


def add_to_collection(collection: Collection, crawls: list[Crawl]) -> str:
    """Add crawls of the collection's org (a crawl may be in several collections)."""
    with refused(ActionRefused.INVALID):
        added = collection.add_crawls(crawls)
    return f"collection {collection.name!r}: added {added} crawl(s)"


def remove_from_collection(collection: Collection, crawls: list[Crawl]) -> str:
    with refused(ActionRefused.INVALID):
        removed = collection.remove_crawls(crawls)
    return f"collection {collection.name!r}: removed {removed} crawl(s)"


def delete_collection(collection: Collection) -> str:
    """The collection goes, with its public link; its crawls and their files stay."""
    collection.delete()
    return f"deleted collection {collection.name!r} (its crawls stay)"


def open_collection_link(collection: Collection, now: dt.datetime | None = None) -> str:
    """A new public link's secret, which exists only in the return value; any older link of
    the collection stops working."""
    return collection.open_link(now or db_now())


def close_collection_link(collection: Collection) -> str:
    with refused():
        collection.close_link()
    return f"collection {collection.name!r}: public link revoked"
