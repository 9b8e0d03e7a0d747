"""Where kept archives go: the data dir, a local folder outside it, or an S3 bucket."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

# An S3 bucket name (the rules every S3-compatible server shares) and a key prefix of plain
# path components, so a crawl's objects are always `<prefix>/<crawl id>/<name>`.
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}(/[A-Za-z0-9][A-Za-z0-9._-]{0,100}){0,9}")


@dataclasses.dataclass(frozen=True)
class S3Target:
    """Where archives go when ARCHIVER_STORAGE_URL is s3://bucket/prefix. The keys are
    excluded from repr(), so a logged or printed target never shows them."""

    endpoint: str  # scheme://host[:port], no path: path-style addressing puts the bucket first
    bucket: str
    prefix: str  # "" or "a/b" (no slash at either end)
    region: str
    access_key: str = dataclasses.field(repr=False)
    secret_key: str = dataclasses.field(repr=False)
    crawler_access_key: str = dataclasses.field(repr=False)
    crawler_secret_key: str = dataclasses.field(repr=False)

    @property
    def root(self) -> str:
        """What CrawlFile.root says for an object of this bucket (its `path` is the key)."""
        return f"s3://{self.bucket}"

    def crawl_prefix(self, crawl_id: str) -> str:
        """The keys of one crawl's objects start with this."""
        return f"{self.prefix}/{crawl_id}/" if self.prefix else f"{crawl_id}/"


class StorageSettings(BaseModel):
    # Where kept archives go: unset = archives/ in the data dir; s3://bucket/prefix = that bucket
    # (docs/storage.md). The endpoint, region and keys only matter for s3://.
    storage_url: str | None = None
    storage_endpoint: str | None = None
    storage_region: str = Field(default="us-east-1", pattern=r"^[a-z0-9-]{1,40}$")
    storage_access_key: SecretStr | None = None
    storage_secret_key: SecretStr | None = None
    # Keys handed to crawlers (which run whatever the web sends): by default the ones above;
    # give keys that may only write under the prefix to keep a hijacked crawler from the rest.
    storage_crawler_access_key: SecretStr | None = None
    storage_crawler_secret_key: SecretStr | None = None
    # Seconds a crawl waits for a bucket that does not answer (its uploads retried, its end
    # put off) before it fails saying so: a maintenance or a network cut is waited out.
    storage_grace: float = Field(default=3600, gt=0, le=7 * 86400)
    # Archives signed with a domain by this authsign server (docs/security.md); unset = with
    # archiver's own key in the data dir. The token reaches crawlers by their environment.
    signing_url: str | None = None
    signing_token: SecretStr | None = None

    @field_validator("signing_url")
    @classmethod
    def _signing_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise ValueError("must be http(s)://host[:port]/path of an authsign server's /sign, "
                             "with no credentials (the token is ARCHIVER_SIGNING_TOKEN)")
        return value

    @field_validator("storage_url")
    @classmethod
    def _storage_url(cls, value: str | None, info) -> str | None:
        if value is None:
            return None
        if not value.startswith("s3://"):
            # data_dir is validated first: DataSettings comes before this model.
            return local_storage(value, info.data.get("data_dir"))
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        if not BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ValueError(f"{bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
        prefix = prefix.strip("/")
        if prefix and not PREFIX.fullmatch(prefix):
            raise ValueError(f"the prefix {prefix!r} must be path components of A-Z a-z 0-9 . _ -")
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"

    @field_validator("storage_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
                or parts.path.strip("/") or parts.query or parts.username or parts.password:
            raise ValueError("must be http(s)://host[:port], with no path, query or credentials")
        return f"{parts.scheme}://{parts.netloc}"

    @model_validator(mode="after")
    def _storage_complete(self):
        if self.s3_url is None:
            return self
        needed = {"storage_endpoint": "ARCHIVER_STORAGE_ENDPOINT", "storage_access_key": "ARCHIVER_STORAGE_ACCESS_KEY",
                  "storage_secret_key": "ARCHIVER_STORAGE_SECRET_KEY"}
        missing = [variable for name, variable in needed.items() if not getattr(self, name)]
        if missing:
            raise ValueError(f"ARCHIVER_STORAGE_URL={self.storage_url} needs {', '.join(missing)}")
        if bool(self.storage_crawler_access_key) != bool(self.storage_crawler_secret_key):
            raise ValueError("ARCHIVER_STORAGE_CRAWLER_ACCESS_KEY and "
                             "ARCHIVER_STORAGE_CRAWLER_SECRET_KEY go together")
        return self

    @property
    def s3_url(self) -> str | None:
        return self.storage_url if self.storage_url and self.storage_url.startswith("s3://") else None

    @property
    def local_storage(self) -> Path | None:
        """The folder archives go to when ARCHIVER_STORAGE_URL is a local path (through
        <data dir>/archives, a link to it: crawls.storage.link_local_archives)."""
        return Path(self.storage_url) if self.storage_url and not self.s3_url else None

    @property
    def s3(self) -> S3Target | None:
        """The bucket archives go to; None when they stay on this host."""
        if self.s3_url is None:
            return None
        bucket, _, prefix = self.storage_url.removeprefix("s3://").partition("/")
        access, secret = self.storage_access_key, self.storage_secret_key
        crawler_access = self.storage_crawler_access_key or access
        crawler_secret = self.storage_crawler_secret_key or secret
        return S3Target(
            endpoint=self.storage_endpoint, bucket=bucket, prefix=prefix, region=self.storage_region,
            access_key=access.get_secret_value(), secret_key=secret.get_secret_value(),
            crawler_access_key=crawler_access.get_secret_value(),
            crawler_secret_key=crawler_secret.get_secret_value(),
        )


def local_storage(value: str, data_dir: Path | None) -> str | None:
    """ARCHIVER_STORAGE_URL as a local folder (a path, or file:///path): its absolute path,
    or None when it is the data dir's own archives/ (the default)."""
    raw = value.removeprefix("file://") if value.startswith("file://") else value
    if value.startswith("file://") and not raw.startswith("/"):
        raise ValueError("a file:// URL needs an absolute path (file:///srv/archives)")
    if "://" in raw or not raw.strip():
        raise ValueError("must be s3://bucket[/prefix], a local folder, or unset (archives in the data dir)")
    path = Path(raw).expanduser().resolve()
    if data_dir is None or path in (data_dir, data_dir / "archives"):
        return None
    if path.is_relative_to(data_dir):
        raise ValueError(f"{path} is inside the data dir {data_dir}: leave it unset, or name a "
                         "folder outside it")
    if data_dir.is_relative_to(path):
        raise ValueError(f"{path} holds the data dir {data_dir}: name a folder of its own")
    return str(path)
