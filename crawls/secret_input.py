"""Secrets a command is given: from a file, stdin or a prompt, never from its arguments.

A process's arguments are public on the host: every local user reads them with `ps` or in
/proc/<pid>/cmdline. So a command that takes a secret reads it from `--secret-file PATH`,
from stdin with `--secret-file -`, or, on a terminal, asks for it without echo (getpass).
"""

from __future__ import annotations

import argparse
import getpass
import os
import stat
import sys

from django.core.management.base import CommandError

MAX_SECRET_BYTES = 64 * 1024  # far above any key; bounds what a wrong file costs

ARGV_REFUSED = ("{option} would put the secret on the command line, where every local user sees it "
                "(ps); give it with --secret-file PATH, --secret-file - (stdin), or type it at the prompt")


def add_secret_file_option(parser, refused_option: str, what: str) -> None:
    """`--secret-file PATH|-`, and the old argv option kept only to refuse it with the way."""
    parser.add_argument("--secret-file", metavar="PATH", help=f"read the {what} from this file, or - for stdin "
                        "(default: ask on the terminal); never give it on the command line")
    parser.add_argument(refused_option, dest="secret_in_argv", default=None, help=argparse.SUPPRESS)


def read_secret(source: str | None, what: str, *, secret_in_argv: str | None = None,
                refused_option: str = "--secret") -> str:
    """The secret from `source` (a path, or "-" for stdin), else from a prompt on a terminal.
    One trailing newline is dropped (`echo S > file`, `printf S |` both work)."""
    if secret_in_argv is not None:
        raise CommandError(ARGV_REFUSED.format(option=refused_option))
    if source == "-":
        text = sys.stdin.read(MAX_SECRET_BYTES + 1)
    elif source:
        text = read_secret_file(source)
    elif sys.stdin is not None and sys.stdin.isatty():
        text = getpass.getpass(f"{what}: ")
    else:
        raise CommandError(f"no {what}: give it with --secret-file PATH or --secret-file - (stdin); "
                           "stdin is not a terminal to ask on")
    if len(text) > MAX_SECRET_BYTES:
        raise CommandError(f"the {what} is longer than {MAX_SECRET_BYTES} bytes: is that the right file?")
    return text.removesuffix("\n").removesuffix("\r")


def read_secret_file(path: str) -> str:
    """A regular file's text, bounded (a FIFO or device cannot block or run on for ever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise CommandError(f"--secret-file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CommandError(f"--secret-file {path}: not a regular file (use --secret-file - for a pipe)")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_SECRET_BYTES + 1)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise CommandError(f"--secret-file {path}: not UTF-8 text") from None
