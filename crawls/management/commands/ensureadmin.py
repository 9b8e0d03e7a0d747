"""Create the first admin account if there is none, and tell the user how to log in.

The generated password goes to a 0600 file in the data dir, never to the terminal, so
it does not end up in logs that capture the start script's output.
"""

from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from crawls.cli import ArchiverCommand
from crawls.rules import shown


class Command(ArchiverCommand):
    help = "Create an 'admin' superuser with a generated password if no superuser exists."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def run(self, *args, username: str, **options):
        users = get_user_model()
        check_username(users, username)
        password_file = settings.DATA_DIR / "admin-password"
        if users.objects.filter(is_superuser=True).exists():
            where = f" (initial password in {password_file})" if password_file.exists() else ""
            self.stdout.write(f"Log in to the admin with your superuser account{where}.")
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username=username, email="", password=password)
        password_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
        self.stdout.write(
            f"Created the admin account: user '{username}'; its password is in "
            f"{password_file} (readable only by you: cat it). Change it with "
            f"'archiver changepassword {username}'."
        )


def check_username(users, username: str) -> None:
    """The rules of the user model's username field (length, allowed characters)."""
    field = users._meta.get_field(users.USERNAME_FIELD)
    try:
        field.clean(username, None)
    except ValidationError as exc:
        raise CommandError(f"--username {shown(username)}: {' '.join(exc.messages)}") from None
