"""Browser profiles: a logged-in browser's profile folder as a tar.gz, stored once per org
and mounted read-only into the crawler instances of crawls that name it (`--profile NAME`).

    profile = add_profile(org, "news-login", Path("profile.tar.gz"), data_dir, now)
    remove_profile(org, "news-login", data_dir)   # refused while a crawl or schedule uses it
    path = profile_path(data_dir, org.pk, "news-login")

A profile holds session cookies, so it is a secret: it lives in `<data dir>/profiles/<org
id>/<name>.tar.gz` (folders 0700, files 0600), is never read back by archiver after it was
checked, and only its name appears in logs, payloads and the admin.

The archive is checked before it is kept, because the crawler unpacks it: a gzip tar of
regular files, folders and links, no absolute or `..` member names, no link pointing out of
the archive, no devices or FIFOs, within size and member limits. The check runs on archiver's
own copy, so the file kept is exactly the file checked.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import posixpath
import secrets
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from django.db import IntegrityError, transaction

from archiver.errors import ConfigError
from crawls.config import check_profile_name, human_size
from crawls.models import BrowserProfile, Org

PROFILES = "profiles"  # data_dir/profiles/<org id>/<name>.tar.gz
SUFFIX = ".tar.gz"
CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ProfileLimits:
    """Bounds on an uploaded profile (a real one is a few MB to a few hundred)."""

    file_bytes: int = 1 << 30  # the tar.gz itself
    unpacked_bytes: int = 4 << 30  # what its members add up to, once unpacked
    members: int = 100_000


def profile_path(data_dir: Path, org_id: int, name: str) -> Path:
    return data_dir / PROFILES / str(org_id) / f"{check_profile_name(name)}{SUFFIX}"


def add_profile(org: Org, name: str, source: Path, data_dir: Path, now: dt.datetime,
                limits: ProfileLimits = ProfileLimits()) -> BrowserProfile:
    """Check `source` and keep a private copy as profile `name` of `org`; ConfigError, with
    nothing kept, if the name is taken or the file is not an acceptable profile."""
    try:
        check_profile_name(name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if BrowserProfile.objects.filter(org=org, name=name).exists():
        raise ConfigError(f"org {org.slug!r} has a browser profile {name!r} already (remove it first)")
    folder = org_folder(data_dir, org.pk)
    temp = folder / f".{name}.{secrets.token_hex(6)}.tmp"
    try:
        sha256, size = copy_private(source, temp, limits.file_bytes)
        check_archive(temp, limits)
        with transaction.atomic():
            profile = BrowserProfile.objects.create(org=org, name=name, sha256=sha256, size_bytes=size,
                                                    created_at=now)
            os.rename(temp, profile_path(data_dir, org.pk, name))
    except IntegrityError:
        if BrowserProfile.objects.filter(org=org, name=name).exists():  # added meanwhile
            raise ConfigError(f"org {org.slug!r} has a browser profile {name!r} already "
                              "(remove it first)") from None
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    return profile


def remove_profile(org: Org, name: str, data_dir: Path) -> None:
    """Forget profile `name` of `org` and delete its file; ConfigError if it does not exist
    or an active crawl or a schedule of the org still names it."""
    profile = BrowserProfile.objects.filter(org=org, name=name).first()
    if profile is None:
        raise ConfigError(f"no browser profile {name!r} in org {org.slug!r} (see: archiver profile list)")
    users = profile.users()
    if users:
        raise ConfigError(f"browser profile {name!r} is used by {', '.join(users)}; "
                          "remove it once they are finished (or deleted)")
    profile.delete()  # the row first: a file without a row is never used
    with contextlib.suppress(FileNotFoundError):
        profile_path(data_dir, org.pk, name).unlink()


def org_folder(data_dir: Path, org_id: int) -> Path:
    """<data dir>/profiles/<org id>/, created 0700 (and made 0700 if it was not)."""
    folder = data_dir / PROFILES / str(org_id)
    for path in (folder.parent, folder):
        path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path, 0o700, follow_symlinks=False)
    return folder


def copy_private(source: Path, target: Path, max_bytes: int) -> tuple[str, int]:
    """Copy `source` (a regular file) to the new file `target` (0600); (sha256, size)."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ConfigError(f"{source} is not a regular file")
    with os.fdopen(fd, "rb") as reader:
        if st.st_size > max_bytes:
            raise ConfigError(f"{source} is {human_size(st.st_size)}; a browser profile may be at "
                              f"most {human_size(max_bytes)}")
        if reader.read(2) != GZIP_MAGIC:
            raise ConfigError(f"{source} is not a gzip file (a browser profile is a .tar.gz)")
        reader.seek(0)
        return write_copy(reader, target, max_bytes)


def write_copy(reader, target: Path, max_bytes: int) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(target, flags, 0o600), "wb") as writer:
        os.fchmod(writer.fileno(), 0o600)  # whatever the umask
        while chunk := reader.read(CHUNK):
            size += len(chunk)
            if size > max_bytes:  # it grew while it was copied
                raise ConfigError(f"a browser profile may be at most {human_size(max_bytes)}")
            digest.update(chunk)
            writer.write(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest(), size


def check_archive(path: Path, limits: ProfileLimits) -> None:
    """ConfigError unless `path` is a gzip tar the crawler may safely unpack."""
    members, unpacked = 0, 0
    try:
        with tarfile.open(path, mode="r|gz") as archive:
            for member in archive:
                members += 1
                unpacked += max(member.size, 0)
                if members > limits.members:
                    raise ConfigError(f"the profile holds more than {limits.members} files")
                if unpacked > limits.unpacked_bytes:
                    raise ConfigError(f"the profile unpacks to more than {human_size(limits.unpacked_bytes)}")
                check_member(member)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ConfigError(f"the profile is not a readable tar.gz archive ({type(exc).__name__})") from None
    if not members:
        raise ConfigError("the profile archive is empty")


def check_member(member: tarfile.TarInfo) -> None:
    """One member: a plain relative name, a kind the crawler may unpack, links that stay inside."""
    name = member.name
    shown = repr(name[:80])
    if not plain_path(name):
        raise ConfigError(f"the profile has an unsafe member name {shown} (absolute, or with ..)")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise ConfigError(f"the profile member {shown} is a device or FIFO; only files, folders and links")
    if member.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
        if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
            raise ConfigError(f"the profile's link {shown} points outside the profile")
    if member.islnk() and not plain_path(member.linkname):
        raise ConfigError(f"the profile's hard link {shown} points outside the profile")


def plain_path(name: str) -> bool:
    """A relative path with no `..` component (and no NUL)."""
    return bool(name) and not name.startswith("/") and "\0" not in name and ".." not in name.split("/")
