"""Run one crawler process and leave how it ended on disk: `python -m runner.local_wrapper PREFIX -- CMD...`

The LocalLauncher starts crawlers in their own session through this wrapper, so that a
daemon restarted after a crash (no longer their parent, so unable to wait() for them)
can still read their exit code from PREFIX.exit; their output goes to PREFIX.log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def exit_code(returncode: int) -> int:
    """A shell-style code: killed by signal N is 128 + N (so SIGKILL is 137)."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m runner.local_wrapper PREFIX -- COMMAND...\n")
        return 2
    prefix, command = Path(argv[0]), argv[2:]
    os.chdir(prefix.parent)
    # Signals reach the whole process group; the crawler handles them, we wait for its code.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(prefix.with_suffix(".log"), "ab") as log:
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     preexec_fn=_default_signals)
            code = exit_code(child.wait())
        except OSError as exc:
            log.write(f"runner.local_wrapper: cannot start {command[0]}: {exc}\n".encode())
            code = 127
    tmp = prefix.with_suffix(".exit.tmp")
    tmp.write_text(f"{code}\n")
    os.replace(tmp, prefix.with_suffix(".exit"))
    return 0


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
