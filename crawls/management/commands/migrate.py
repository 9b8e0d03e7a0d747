"""`archiver migrate`: Django's migrate, which also creates a new SQLite database's folder.

It is the only command that may start a new database: the others refuse to run where
none exists (crawls.cli.require_database), so a command run in the wrong folder leaves
nothing behind. The folder is created 0700 and the database 0600 (docs/configuration.md:
the data dir is private).
"""

from __future__ import annotations

import os

from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate

from crawls.cli import one_line, sqlite_file

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


class Command(DjangoMigrate):
    def execute(self, *args, **options):
        if options.get("app_label") == "" or options.get("migration_name") == "":
            raise CommandError("an app label or migration name is empty (omit it to migrate everything)")
        # Before execute(): its system checks already open the database.
        database = sqlite_file(options["database"])
        created = database is not None and not database.exists()
        if created:
            database.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        try:
            return super().execute(*args, **options)
        except CommandError as exc:  # Django's own messages echo the label raw and whole
            raise CommandError(one_line(str(exc)), returncode=exc.returncode) from None
        finally:
            if created and database.exists():
                os.chmod(database, PRIVATE_FILE)
