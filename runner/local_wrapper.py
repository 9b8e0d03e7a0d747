"""Run one crawler process, contained, and leave how it ended on disk.

    python -I .../runner/local_wrapper.py PREFIX [--memory BYTES] -- COMMAND...

The LocalLauncher starts crawlers in their own session through this wrapper, so that a
daemon restarted after a crash (no longer their parent, so unable to wait() for them)
can still read their exit code from PREFIX.exit; their output goes to PREFIX.log.

Before the crawler starts, the wrapper limits itself, and so the crawler, which inherits it
all: memory (RLIMIT_DATA, the container memory rule), open files, file size, and
PR_SET_NO_NEW_PRIVS (no setuid binary can give it more rights). The environment is the
launcher's allowlist; this file imports the standard library only, because it runs with
`-I` (no PYTHON* variables, no user site, no script folder on sys.path).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

NOFILE = 4096  # open files; the containers get the same nofile ulimit
FSIZE = 64 * 2**30  # bytes in any one file the crawler writes (a WACZ is far smaller)
PR_SET_NO_NEW_PRIVS = 38  # <linux/prctl.h>
CANNOT_START = 127


def exit_code(returncode: int) -> int:
    """A shell-style code: killed by signal N is 128 + N (so SIGKILL is 137)."""
    return 128 - returncode if returncode < 0 else returncode


def parse(argv: list[str]) -> tuple[Path, int | None, list[str]] | None:
    if "--" not in argv:
        return None
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    if not command or len(options) not in (1, 3) or (len(options) == 3 and options[1] != "--memory"):
        return None
    try:
        memory = int(options[2]) if len(options) == 3 else None
    except ValueError:
        return None
    return Path(options[0]), memory, command


def contain(memory: int | None) -> None:
    """Limits and rights the crawler inherits. Hard limits too: it cannot raise them again."""
    if memory:
        _limit(resource.RLIMIT_DATA, memory)
    _limit(resource.RLIMIT_NOFILE, NOFILE)
    _limit(resource.RLIMIT_FSIZE, FSIZE)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(errno)}")


def _limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        sys.stderr.write("usage: local_wrapper.py PREFIX [--memory BYTES] -- COMMAND...\n")
        return 2
    prefix, memory, command = parsed
    os.chdir(prefix.parent)
    # Signals reach the whole process group; the crawler handles them, we wait for its code.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(prefix.with_suffix(".log"), "ab") as log:
        try:
            contain(memory)
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     preexec_fn=_default_signals)
            code = exit_code(child.wait())
        except OSError as exc:
            log.write(f"local_wrapper: cannot start {command[0]}: {exc}\n".encode())
            code = CANNOT_START
    tmp = prefix.with_suffix(".exit.tmp")
    tmp.write_text(f"{code}\n")
    os.replace(tmp, prefix.with_suffix(".exit"))
    return 0


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
