"""`archiver profile add|list|remove`: browser profiles crawls use with `add --profile NAME`.

A profile is a tar.gz of a logged-in browser's profile folder (browsertrix-crawler's
`create-login-profile` makes one). It is a secret: stored privately in the data dir
(crawls/profiles.py), never printed; only its name, size and sha256 are shown.
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from archiver import conf
from crawls.cli import ArchiverCommand, OneLineParser, age
from crawls.config import human_size
from crawls.lease import db_now
from crawls.management.commands.add import find_org
from crawls.models import BrowserProfile
from crawls.profiles import add_profile, remove_profile


class Command(ArchiverCommand):
    help = "Add, list and remove the browser profiles (logged-in browsers) crawls can use."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, parser_class=OneLineParser,
                                        metavar="{add,list,remove}")
        add = actions.add_parser("add", help="keep a profile tar.gz under NAME for the org's crawls")
        add.add_argument("name", metavar="NAME", help="letters, digits, - and _ (at most 64)")
        add.add_argument("file", metavar="FILE", help="the profile as a .tar.gz")
        add.add_argument("--org", default="default", metavar="SLUG")
        add.add_argument("--json", action="store_true")
        lister = actions.add_parser("list", help="list profiles (names, sizes, hashes; never contents)")
        lister.add_argument("--org", metavar="SLUG", help="only this org's (default: all orgs)")
        lister.add_argument("--json", action="store_true")
        remove = actions.add_parser("remove", help="delete a profile no active crawl or schedule uses")
        remove.add_argument("name", metavar="NAME")
        remove.add_argument("--org", default="default", metavar="SLUG")

    def run(self, *, action, **options):
        getattr(self, action)(**options)

    def add(self, *, name, file, org, json, **_):
        profile = add_profile(find_org(org), name, Path(file), conf.get().data_dir, db_now())
        if json:
            self.write_json(profile.summary())
        else:
            self.stdout.write(f"added browser profile {profile.name} to org {profile.org.slug} "
                              f"({human_size(profile.size_bytes)}, sha256 {profile.sha256[:12]}…)")

    def list(self, *, org, json, **_):
        profiles = BrowserProfile.objects.select_related("org").order_by("org__slug", "name")
        if org is not None:
            profiles = profiles.filter(org=find_org(org))
        if json:
            self.write_json([profile.summary() for profile in profiles])
            return
        now = db_now()
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("ORG", "NAME", "SIZE", "SHA256", "ADDED"):
            table.add_column(column, no_wrap=True)
        for profile in profiles:
            table.add_row(profile.org.slug, profile.name, human_size(profile.size_bytes),
                          profile.sha256[:12], age(profile.created_at, now))
        self.render(table)

    def remove(self, *, name, org, **_):
        remove_profile(find_org(org), name, conf.get().data_dir)
        self.stdout.write(f"removed browser profile {name} from org {org}")
