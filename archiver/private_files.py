"""Files only archiver's user may read (settings, keys, the embedded Redis's password)."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, data: bytes | str) -> None:
    """Replace `path` at once with `data`, mode 0600: no reader sees half of it, and no one else
    reads it in between (the temporary is 0600 from its creation, whatever the umask)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever mode an old temporary had
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
