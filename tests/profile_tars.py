"""Browser profile archives for tests: a plausible one, and hostile ones built member by member."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "") -> tuple:
    return name, kind, data, link


def write_tar_gz(path: Path, members: list[tuple]) -> Path:
    """A gzip tar of `members` (name, tar type, data, link target), exactly as given: tarfile
    writes absolute names, `..` and escaping links as they are, which is the point."""
    with tarfile.open(path, "w:gz") as archive:
        for name, kind, data, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kind, link, 0o755 if kind == tarfile.DIRTYPE else 0o600
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                archive.addfile(info)
    return path


def good_profile(path: Path, cookie: bytes = b"session=SECRET-COOKIE-VALUE") -> Path:
    """What create-login-profile makes, in small: folders, files, a link that stays inside."""
    return write_tar_gz(path, [
        member("./", tarfile.DIRTYPE),
        member("./Default/", tarfile.DIRTYPE),
        member("./Default/Cookies", data=cookie),
        member("./Default/Preferences", data=b"{}"),
        member("./Local State", data=b"{}"),
        member("./Default/Current", tarfile.SYMTYPE, link="../Local State"),
        member("./Default/Copy", tarfile.LNKTYPE, link="./Default/Preferences"),
    ])
