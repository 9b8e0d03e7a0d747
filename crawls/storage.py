"""Where kept archives live: S3-compatible object storage (ARCHIVER_STORAGE_URL=s3://bucket/prefix),
or a local folder other than the data dir (ARCHIVER_STORAGE_URL=/path: link_local_archives).

    store = storage.object_store(settings)          # None: archives stay in the data dir
    size = store.head(key)                          # None if there is no such object
    for chunk in store.read(key, first, last): ...  # GetObject with a Range
    with store.open(key, size) as f: ...            # a seekable file of it, read by ranges
    for key, size in store.listing(prefix): ...     # ListObjectsV2, bounded
    store.delete(key)

A CrawlFile kept in a bucket has `root = "s3://<bucket>"` and `path = <key>`; every other
row is a file under its data dir, as before. Keys are `<prefix>/<crawl id>/<name>`.

Errors are StorageError, whose message names the operation, the bucket and the key, never
the keys of the account: botocore's own messages carry neither, and its exceptions are not
passed on (their context holds the request).
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Iterator
from pathlib import Path

from archiver_crawler.upload import error_code

from archiver.conf import S3Target, Settings
from archiver.errors import ArchiverError, ConfigError

CHUNK = 256 * 1024
CONNECT_TIMEOUT = 5  # seconds: an object store that does not answer is a wait, not a hang
READ_TIMEOUT = 30
OPEN_BUFFER = 1 << 20  # ObjectStore.open(): at most one GET per MiB read
MAX_LISTED = 100_000  # ObjectStore.listing(): objects of one prefix looked at


class StorageError(ArchiverError):
    """The object store did not answer, or refused a request (the message names no secret)."""


def link_local_archives(settings: Settings) -> Path | None:
    """With ARCHIVER_STORAGE_URL a local folder: make <data dir>/archives a link to it
    (created, mode 0700), so every kept file goes there while rows keep their paths
    (`archives/<crawl>/<name>` under the data dir). The file boundary allows that one
    folder to be a link (runner/archive.py). ConfigError, changing nothing, when the data
    dir's archives/ already holds files or links elsewhere: moving archives is the
    operator's call. Returns the folder, or None with the default storage."""
    target = settings.local_storage
    if target is None:
        return None
    link = settings.data_dir / "archives"
    try:
        linked = link.is_symlink()
        if linked and Path(os.readlink(link)) != target:
            raise ConfigError(f"ARCHIVER_STORAGE_URL is {target}, but {link} links to "
                              f"{os.readlink(link)}: move its archives there, then remove the link")
        if not linked and link.is_dir() and any(link.iterdir()):
            raise ConfigError(f"ARCHIVER_STORAGE_URL is {target}, but {link} holds archives: "
                              f"move them (mv {link}/* {target}/), remove {link}, and start again")
        if not linked and link.exists() and not link.is_dir():
            raise ConfigError(f"{link} is a file; ARCHIVER_STORAGE_URL={target} needs that name")
        # Only now, so a refused start leaves nothing behind.
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not linked:
            if link.is_dir():
                link.rmdir()
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            os.symlink(target, link)
    except OSError as exc:
        raise ConfigError(f"cannot keep archives in {target}: {exc.strerror or exc}") from exc
    return target


def is_object(crawl_file) -> bool:
    """Whether a CrawlFile is kept in a bucket (else it is a file under its data dir)."""
    return crawl_file.root.startswith("s3://")


def object_store(settings: Settings) -> ObjectStore | None:
    target = settings.s3
    return None if target is None else store_for(target)


@functools.cache
def store_for(target: S3Target) -> ObjectStore:
    """One client per target and process (boto3 clients are thread-safe, and slow to make)."""
    return ObjectStore(target)


class ObjectStore:
    """The few S3 calls archiver makes, path-style, with bounded timeouts and retries."""

    def __init__(self, target: S3Target):
        import boto3
        from botocore.config import Config

        self.target = target
        self.bucket = target.bucket
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=target.endpoint, region_name=target.region,
            aws_access_key_id=target.access_key, aws_secret_access_key=target.secret_key,
            config=Config(s3={"addressing_style": "path"}, connect_timeout=CONNECT_TIMEOUT,
                          read_timeout=READ_TIMEOUT, retries={"max_attempts": 2, "mode": "standard"},
                          # Only where the API requires them: S3-compatible servers differ.
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"),
        )

    def _failed(self, what: str, key: str, exc: Exception) -> StorageError:
        return StorageError(f"object storage: cannot {what} s3://{self.bucket}/{key} ({error_code(exc)})")

    def head(self, key: str) -> int | None:
        """The object's size; None when there is no such object."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._failed("look at", key, exc) from None
        except BotoCoreError as exc:
            raise self._failed("look at", key, exc) from None
        return int(answer["ContentLength"])

    def read(self, key: str, first: int, last: int) -> Iterator[bytes]:
        """Bytes first..last (inclusive) of the object, streamed in chunks."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={first}-{last}")
        except (BotoCoreError, ClientError) as exc:
            raise self._failed("read", key, exc) from None
        return stream(answer["Body"])

    def open(self, key: str, size: int) -> io.BufferedReader:
        """The object as a seekable binary file of `size` bytes, each read a ranged GET (for
        zipfile: a WACZ's page lists without fetching its WARCs)."""
        return io.BufferedReader(ObjectFile(self, key, size), buffer_size=OPEN_BUFFER)

    def write(self, key: str, handle, size: int) -> None:
        """Upload `size` bytes from a binary file object (multipart when large)."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.upload_fileobj(handle, self.bucket, key)
        except (Boto3Error, BotoCoreError, ClientError) as exc:
            raise self._failed("write", key, exc) from None

    def delete(self, key: str) -> None:
        """Delete one object; deleting one that is gone already is not an error (S3's rule)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            raise self._failed("delete", key, exc) from None

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (for tests and for an operator's checks)."""
        return [key for key, _size in self.listing(prefix)]

    def listing(self, prefix: str, limit: int = MAX_LISTED) -> list[tuple[str, int]]:
        """(key, size) of the objects under `prefix`, in key order, at most `limit` of them."""
        from botocore.exceptions import BotoCoreError, ClientError

        found: list[tuple[str, int]] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix):
                found += [(item["Key"], int(item["Size"])) for item in page.get("Contents", [])]
                if len(found) >= limit:
                    return found[:limit]
        except (BotoCoreError, ClientError) as exc:
            raise self._failed("list", prefix, exc) from None
        return found


class ObjectFile(io.RawIOBase):
    """ObjectStore.open(): reads past `size` return nothing, a store that fails raises
    StorageError (an object replaced by a shorter one reads short: zipfile then refuses it)."""

    def __init__(self, store: ObjectStore, key: str, size: int):
        super().__init__()
        self.store, self.key, self.size, self.position = store, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self.position = base + offset
        return self.position

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self.size - self.position)
        if want <= 0:
            return 0
        got = 0
        for chunk in self.store.read(self.key, self.position, self.position + want - 1):
            chunk = chunk[:want - got]
            buffer[got:got + len(chunk)] = chunk
            got += len(chunk)
        self.position += got
        return got


def stream(body) -> Iterator[bytes]:
    """A GetObject body in chunks, closed when done or abandoned (a client that hung up)."""
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()


def delete_objects(files, settings: Settings) -> int:
    """Delete the objects of these CrawlFile rows (files on disk are not touched here);
    StorageError if the store refuses or is away: the caller keeps the rows then."""
    objects = [f for f in files if is_object(f)]
    if not objects:
        return 0
    store = object_store(settings)
    if store is None or any(f.root != store.target.root for f in objects):
        raise StorageError("object storage: these archives are in a bucket that "
                           "ARCHIVER_STORAGE_URL no longer names; set it back to delete them")
    for crawl_file in objects:
        store.delete(crawl_file.path)
    return len(objects)
