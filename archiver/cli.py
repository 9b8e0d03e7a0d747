"""The `archiver` console script: `archiver <command>` runs any management command (the
same as `python manage.py <command>`) with archiver's settings; `archiver --version`.

`archiver` alone (or `archiver help`) lists archiver's own commands, grouped, one line
each; Django's own (`flush`, `startproject`…) are behind `archiver help --all`, as a new
user looking for "how do I add a crawl" should not have to read past them.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys

# The groups a person looks in; a command of archiver's apps not named here is listed
# under "more", so a new command is never hidden.
GROUPS = {
    "crawls": ["add", "status", "pause", "resume", "stop", "cancel", "retry", "scale",
               "exclude", "delete", "logs", "schedule"],
    "archives": ["files", "pages", "search", "collection", "diff", "verify", "signingkey", "qa", "reindex", "profile"],
    "operations": ["run", "doctor", "migrate", "pull", "ensureadmin", "org", "token",
                   "webhook", "pingwebhook"],
}
OWN_APPS = ("crawls", "runner", "archiver")


def versions() -> str:
    """archiver's, its crawler's, Django's and Python's versions, one per line."""
    import archiver_crawler
    import django

    import archiver

    return "\n".join([
        f"archiver {archiver.__version__}",
        f"archiver-crawler {archiver_crawler.__version__}",
        f"Django {django.get_version()}",
        f"Python {platform.python_version()} ({sys.executable})",
    ])


def first_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line.split(". ")[0].rstrip(".") if line else ""


def own_commands() -> dict[str, list[tuple[str, str]]]:
    """Group -> [(command, its help's first sentence)] for archiver's own commands."""
    import django
    from django.core.management import get_commands, load_command_class

    django.setup()
    own = {name: app for name, app in get_commands().items() if app.split(".")[0] in OWN_APPS}
    grouped = {group: [name for name in names if name in own] for group, names in GROUPS.items()}
    listed = {name for names in grouped.values() for name in names}
    grouped["more"] = sorted(set(own) - listed)
    return {
        group: [(name, first_line(load_command_class(own[name], name).help)) for name in names]
        for group, names in grouped.items() if names
    }


def cut(line: str, columns: int | None) -> str:
    """One line per command on a terminal, even for a long help (the whole text is in
    `archiver help NAME`); in a pipe or a file (`columns` None) the line is whole, since
    nothing says how wide its reader is and grep should find every word."""
    if columns is None or len(line) <= columns:
        return line
    return line[:columns - 1].rstrip() + "…"


def terminal_columns() -> int | None:
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def listing() -> str:
    groups = own_commands()
    width = max(len(name) for names in groups.values() for name, _ in names)
    lines = ["Usage: archiver COMMAND [options]", ""]
    for group, commands in groups.items():
        lines.append(f"{group}:")
        lines += [cut(f"  {name:<{width}}  {text}", terminal_columns()) for name, text in commands]
        lines.append("")
    lines += ["archiver help COMMAND   one command's options",
              "archiver help --all     every command, Django's own too",
              "archiver --version      archiver's, its crawler's, Django's and Python's versions"]
    return "\n".join(lines) + "\n"


def main() -> None:
    # `archiver --version` alone; after a command (`archiver add --version`) it stays
    # Django's option, as every management command has it.
    if sys.argv[1:] in (["--version"], ["-V"]):
        sys.stdout.write(versions() + "\n")
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        if sys.argv[1:] in ([], ["help"], ["--help"], ["-h"]):
            sys.stdout.write(listing())
            return
        if sys.argv[1:] == ["help", "--all"]:
            sys.argv = [sys.argv[0], "help"]  # Django's own listing of every command
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"archiver: configuration error: {exc}\n")
        sys.exit(2)
