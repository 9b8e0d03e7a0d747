"""Uploading each session's WACZ to S3-compatible storage and reporting it, as the real
browsertrix-crawler does (crawler-protocol.md):

    STORE_ENDPOINT_URL  endpoint + bucket + "/"  (http://127.0.0.1:9000/archives/)
    STORE_PATH          the key prefix under the bucket ("crawls/<id>/"), may be empty
    STORE_ACCESS_KEY, STORE_SECRET_KEY, STORE_REGION (default us-east-1)
    STORE_FILENAME      the object's name: @ts, @hostname, @hostsuffix and @id are replaced
                        (default @ts-@id.wacz)
    STORE_USER          reported as `user`
    WEBHOOK_URL         redis://host:port/db/key (RPUSH) or http(s)://... (POST)

After the upload the crawler reports, as JSON, `{id, user, filename, path, size, hash,
bytes, completed}`: `path` is the object's name under the prefix, `filename` the full URL
(STORE_ENDPOINT_URL + STORE_PATH + name), `hash` the hex SHA-256, `bytes` = `size`.
Addressing is path-style (the bucket is the first path component), as MinIO, Ceph and
moto expect. Neither the keys nor WEBHOOK_URL (which holds the Redis password) are logged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from archiver_crawler.errors import ConfigError, UploadFailed

logger = logging.getLogger(__name__)

DEFAULT_FILENAME = "@ts-@id.wacz"
DEFAULT_REGION = "us-east-1"
CHUNK = 1 << 20
REPORT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Store:
    """Where this crawler's WACZ files go, from STORE_* (secrets kept out of repr())."""

    endpoint: str  # scheme://host[:port]
    bucket: str
    prefix: str  # the key prefix under the bucket ("" or ending in "/")
    full_prefix: str  # STORE_ENDPOINT_URL + STORE_PATH: reported `filename` = this + name
    region: str
    filename: str
    user: str = ""
    access_key: str = field(default="", repr=False)
    secret_key: str = field(default="", repr=False)
    webhook_url: str = field(default="", repr=False)

    def key(self, name: str) -> str:
        return self.prefix + name


def store_from_env(env: Mapping[str, str]) -> Store | None:
    """The store STORE_ENDPOINT_URL names, or None (no upload); ConfigError if malformed."""
    if not env.get("STORE_ENDPOINT_URL"):
        return None
    url = env["STORE_ENDPOINT_URL"] + env.get("STORE_PATH", "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("STORE_ENDPOINT_URL must be an http(s) URL ending in the bucket and /")
    bucket = parts.path[1:].split("/")[0]
    if not bucket:
        raise ConfigError("STORE_ENDPOINT_URL names no bucket (endpoint + bucket + /)")
    webhook = env.get("WEBHOOK_URL", "")
    if webhook and not webhook.startswith(("redis://", "http://", "https://")):
        raise ConfigError("WEBHOOK_URL must be redis://host:port/db/key or an http(s) URL")
    if webhook.startswith("redis://") and len(webhook.split("/")) != 5:
        raise ConfigError("WEBHOOK_URL must be in the form redis://host:port/db/key")
    try:
        import boto3  # noqa: F401
    except ImportError as exc:
        raise ConfigError("STORE_ENDPOINT_URL is set but boto3 is missing: "
                          "install archiver-crawler[s3]") from exc
    return Store(
        endpoint=f"{parts.scheme}://{parts.netloc}", bucket=bucket,
        prefix=parts.path[len(bucket) + 2:], full_prefix=url,
        region=env.get("STORE_REGION") or DEFAULT_REGION,
        filename=env.get("STORE_FILENAME") or DEFAULT_FILENAME, user=env.get("STORE_USER", ""),
        access_key=env.get("STORE_ACCESS_KEY", ""), secret_key=env.get("STORE_SECRET_KEY", ""),
        webhook_url=webhook,
    )


def interpolate(template: str, crawl_id: str, hostname: str, now: dt.datetime) -> str:
    """STORE_FILENAME's tokens, each replaced once, as the real crawler does."""
    stamp = now.astimezone(dt.UTC).strftime("%Y%m%d%H%M%S") + f"{now.microsecond // 1000:03d}"
    for token, value in (("@ts", stamp), ("@hostname", hostname),
                         ("@hostsuffix", hostname[-14:]), ("@id", crawl_id)):
        template = template.replace(token, value, 1)
    return template


def digest_of(path: Path) -> tuple[int, str]:
    """(size, hex sha256) of a file, read once."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def upload(store: Store, wacz: Path, name: str, crawl_id: str, completed: bool) -> dict:
    """Put `wacz` at the store's prefix + `name`; the report to send (blocking: run it in a
    thread). UploadFailed names the bucket and key, never a credential."""
    import boto3
    from boto3.exceptions import Boto3Error
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    size, sha256 = digest_of(wacz)
    client = boto3.session.Session().client(
        "s3", endpoint_url=store.endpoint, region_name=store.region,
        aws_access_key_id=store.access_key, aws_secret_access_key=store.secret_key,
        config=Config(s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60,
                      retries={"max_attempts": 5, "mode": "standard"},
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))
    key = store.key(name)
    logger.info("uploading %s (%d bytes) to s3://%s/%s", wacz.name, size, store.bucket, key,
                extra={"context": "storage"})
    try:
        client.upload_file(str(wacz), store.bucket, key,
                           Config=TransferConfig(multipart_chunksize=100 << 20, use_threads=False))
    except (Boto3Error, BotoCoreError, ClientError, OSError) as exc:
        raise UploadFailed(f"uploading to s3://{store.bucket}/{key} failed: "
                           f"{error_code(exc)}") from None
    finally:
        client.close()
    return {"id": crawl_id, "user": store.user, "filename": store.full_prefix + name,
            "path": name, "size": size, "hash": sha256, "bytes": size, "completed": completed}


def error_code(exc: BaseException) -> str:
    """S3's error code (NoSuchBucket, AccessDenied...) of `exc` or of what it wraps, else its
    type: never the exception's text, which may quote the request."""
    seen: BaseException | None = exc
    for _ in range(5):
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code"):
            return str(response["Error"]["Code"])
        if seen is None:
            break
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


async def report(store: Store, body: dict) -> None:
    """Tell WEBHOOK_URL about an upload: RPUSH for redis://host:port/db/key, else POST."""
    if not store.webhook_url:
        return
    data = json.dumps(body)
    try:
        if store.webhook_url.startswith("redis://"):
            await _rpush(store.webhook_url, data)
        else:
            await _post(store.webhook_url, data)
    except Exception as exc:  # noqa: BLE001 - any failure to report is an upload failure
        raise UploadFailed(f"reporting the upload failed ({type(exc).__name__})") from None
    logger.info("reported the upload of %s", body["path"], extra={"context": "storage"})


async def _rpush(url: str, data: str) -> None:
    import redis.asyncio as aioredis

    parts = url.split("/")
    client = aioredis.Redis.from_url("/".join(parts[:4]), socket_timeout=REPORT_TIMEOUT,
                                     socket_connect_timeout=REPORT_TIMEOUT)
    try:
        await client.rpush(parts[4], data)
    finally:
        await client.aclose()


async def _post(url: str, data: str) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=REPORT_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session, \
            session.post(url, data=data, headers={"Content-Type": "application/json"}) as answer:
        answer.raise_for_status()
