"""A WACZ made elsewhere (py-wacz, ArchiveWeb.page, Browsertrix), checked before it is taken in.

    check = check_wacz(fd, size, limits)     # its pages, whether it is signed; or Refused
    parts = unpack_multi(fd, size, folder, limits)  # a multi-WACZ's WACZs, written into folder

A WACZ is a zip, and a zip is hostile input: its directory is measured before it is parsed
(runner/wacz_members.py zip_members), member names that are absolute, climb (`..`), or hold a
backslash or NUL are refused, every file datapackage.json lists is hashed and must have the
hash and size it claims (a lying datapackage is refused), datapackage-digest.json must hash
datapackage.json, decompressing stops at the sizes the zip claims and within INFLATION times
the file (a zip bomb), and the page lists are read within runner/wacz_members.py's page limits.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO

from runner.file_guard import CHUNK, Limits, Refused
from runner.intake_warc import INFLATION, SLACK
from runner.wacz_members import page_entries, zip_file, zip_members

PACKAGE_BYTES = 16 << 20  # datapackage.json (a few hundred bytes per file it lists)
MULTI_PARTS = 1000  # WACZs in one multi-WACZ
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, zlib.error,
              struct.error, NotImplementedError)


@dataclass
class Checked:
    """What a WACZ that passed the checks holds."""

    pages: list[dict] = field(default_factory=list)
    signed: bool = False  # datapackage-digest.json carries signedData


def member_names(fd: int, size: int, limits: Limits) -> dict[str, int]:
    """name: size of every member, refused when a name is a path trick or said twice."""
    names: dict[str, int] = {}
    for name, member_size in zip_members(fd, size, limits):
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or "\0" in name or ".." in parts or \
                (len(name) > 1 and name[1] == ":"):
            raise Refused(f"it has a member named {name[:200]!r}, outside the archive")
        if name in names:
            raise Refused(f"it has two members named {name[:200]!r}")
        names[name] = member_size
    return names


def is_multi(names: dict[str, int]) -> bool:
    """A multi-WACZ (Browsertrix's collection download): WACZs at its top, and no WARCs."""
    return any(n.endswith(".wacz") and "/" not in n for n in names) and \
        not any(n.startswith("archive/") for n in names)


def check_wacz(fd: int, size: int, limits: Limits) -> Checked:
    names = member_names(fd, size, limits)
    if "datapackage.json" not in names:
        raise Refused("it has no datapackage.json (not a WACZ)")
    if not any(n.startswith("archive/") and n != "archive/" for n in names):
        raise Refused("it holds no WARC (nothing under archive/)")
    if not any(n.startswith("indexes/") and n != "indexes/" for n in names):
        raise Refused("it has no index (nothing under indexes/), so it cannot be replayed")
    budget = [min(limits.file_bytes, size * INFLATION + SLACK)]
    try:
        with zip_file(fd) as raw, zipfile.ZipFile(raw) as wacz:
            package_bytes = read_small(wacz, "datapackage.json", PACKAGE_BYTES)
            listed = resources(package_bytes)
            for path, claimed in listed.items():
                check_resource(wacz, names, path, claimed, budget)
            for name in names:
                if name.startswith("archive/") and name != "archive/" and name not in listed:
                    raise Refused(f"datapackage.json does not list {name[:200]}, so its "
                                  "hash cannot be checked")
            signed = check_digest(wacz, names, package_bytes)
    except ZIP_ERRORS as exc:
        raise Refused(f"not a readable zip ({exc})") from None
    return Checked(pages=list(page_entries(fd, size, limits)), signed=signed)


def read_small(wacz: zipfile.ZipFile, name: str, most: int) -> bytes:
    if wacz.getinfo(name).file_size > most:
        raise Refused(f"its {name} is over {most} bytes")
    with wacz.open(name) as stream:
        return stream.read(most + 1)[:most]


def resources(package_bytes: bytes) -> dict[str, dict]:
    """path: {hash, bytes} of every file datapackage.json lists."""
    try:
        package = json.loads(package_bytes)
    except ValueError:
        raise Refused("its datapackage.json is not JSON") from None
    listed = package.get("resources") if isinstance(package, dict) else None
    if not isinstance(listed, list):
        raise Refused("its datapackage.json lists no resources")
    found = {}
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise Refused("its datapackage.json has a resource without a path")
        found[entry["path"]] = entry
    return found


def check_resource(wacz: zipfile.ZipFile, names: dict[str, int], path: str, claimed: dict,
                   budget: list[int]) -> None:
    """The member `path` has the size and SHA-256 datapackage.json claims."""
    if path not in names:
        raise Refused(f"datapackage.json lists {path[:200]!r}, which it does not hold")
    size = names[path]
    if "bytes" in claimed and claimed["bytes"] != size:
        raise Refused(f"datapackage.json says {path[:200]} has {claimed['bytes']} bytes; it "
                      f"has {size}")
    budget[0] -= size
    if budget[0] < 0:
        raise Refused("its members inflate far past its size (a zip bomb?)")
    hashed = hashlib.sha256()
    with wacz.open(path) as stream:  # zipfile stops at the size the directory says
        while chunk := stream.read(CHUNK):
            hashed.update(chunk)
    want = str(claimed.get("hash") or "")
    if want.removeprefix("sha256:") != hashed.hexdigest():
        raise Refused(f"datapackage.json says {path[:200]} hashes to {want[:80]!r}; it hashes "
                      f"to sha256:{hashed.hexdigest()}")


def check_digest(wacz: zipfile.ZipFile, names: dict[str, int], package_bytes: bytes) -> bool:
    """datapackage-digest.json, when there is one, hashes datapackage.json: whether it is
    signed (the signature itself is verify's to check)."""
    if "datapackage-digest.json" not in names:
        return False
    try:
        digest = json.loads(read_small(wacz, "datapackage-digest.json", 1 << 20))
    except ValueError:
        raise Refused("its datapackage-digest.json is not JSON") from None
    if not isinstance(digest, dict):
        raise Refused("its datapackage-digest.json is not a JSON object")
    want = str(digest.get("hash") or "")
    if want.removeprefix("sha256:") != hashlib.sha256(package_bytes).hexdigest():
        raise Refused("its datapackage-digest.json does not hash its datapackage.json")
    return isinstance(digest.get("signedData"), dict)


def unpack_multi(fd: int, size: int, names: dict[str, int], folder: int, prefix: str,
                 limits: Limits) -> list[str]:
    """A multi-WACZ's WACZs written into `folder` (a descriptor) as <prefix>-<n>.wacz: their
    names. Only its top-level WACZs count; each is checked afterwards like any WACZ."""
    parts = sorted(n for n in names if n.endswith(".wacz") and "/" not in n)
    if len(parts) > MULTI_PARTS:
        raise Refused(f"it holds over {MULTI_PARTS} WACZs")
    budget, written = min(limits.file_bytes, size * INFLATION + SLACK), []
    try:
        with zip_file(fd) as raw, zipfile.ZipFile(raw) as multi:
            for n, part in enumerate(parts, 1):
                budget -= names[part]
                if budget < 0:
                    raise Refused("its WACZs inflate far past its size (a zip bomb?)")
                name = f"{prefix}-{n}.wacz"
                copy_member(multi, part, folder, name)
                written.append(name)
    except ZIP_ERRORS as exc:
        raise Refused(f"not a readable zip ({exc})") from None
    return written


def copy_member(archive: zipfile.ZipFile, member: str, folder: int, name: str) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o600, dir_fd=folder)
    with os.fdopen(out, "wb") as target, archive.open(member) as stream:
        copy(stream, target)


def copy(stream: BinaryIO, target: BinaryIO) -> None:
    while chunk := stream.read(CHUNK):
        target.write(chunk)
