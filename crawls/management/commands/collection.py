"""`archiver collection create|add|remove|list|show|delete|link`: named sets of one org's
crawls, replayed and downloaded as one (docs/cli.md). Every change goes through
crawls.actions, as the admin's and the API's do."""

from __future__ import annotations

from django.core.management.base import CommandError
from rich.table import Table

from archiver import conf
from crawls import actions
from crawls.cli import ArchiverCommand, OneLineParser, age, find_crawl
from crawls.config import human_size
from crawls.lease import db_now
from crawls.models import Collection, Org


def public_link(secret: str) -> str:
    return f"{conf.get().replay_url}/c/{secret}/"


class Command(ArchiverCommand):
    help = "Create, fill, list, show and delete collections of crawls; open or revoke a public link."

    def add_arguments(self, parser):
        actions_ = parser.add_subparsers(dest="action", required=True, parser_class=OneLineParser,
                                         metavar="{create,add,remove,list,show,delete,link}")
        create = actions_.add_parser("create", help="a new, empty collection")
        create.add_argument("name", metavar="NAME")
        create.add_argument("--description", default="")
        for name, text in (("add", "add crawls to a collection"), ("remove", "remove crawls from it")):
            sub = actions_.add_parser(name, help=text)
            sub.add_argument("name", metavar="NAME")
            sub.add_argument("crawls", nargs="+", metavar="CRAWL", help="crawl ids (any unique prefix)")
        actions_.add_parser("list", help="the org's collections")
        show = actions_.add_parser("show", help="a collection's crawls")
        show.add_argument("name", metavar="NAME")
        delete = actions_.add_parser("delete", help="delete a collection (its crawls stay)")
        delete.add_argument("name", metavar="NAME")
        link = actions_.add_parser("link", help="open a public read-only link (printed once), or revoke it")
        link.add_argument("name", metavar="NAME")
        link.add_argument("--revoke", action="store_true")
        for sub in actions_.choices.values():
            sub.add_argument("--org", default="default", metavar="SLUG", help="the org (default: default)")
            sub.add_argument("--json", action="store_true")

    def run(self, *, action, org, **options):
        owner = Org.objects.filter(slug=org).first()
        if owner is None:
            raise CommandError(f"no org {org!r} (see `archiver org list`)")
        getattr(self, action)(owner, **options)

    def named(self, org: Org, name: str) -> Collection:
        return actions.find_collection(org.collections.all(), name)

    def crawls_of(self, org: Org, ids: list[str]):
        # Any org's crawl is found, so that one of another org is refused by name, not "unknown".
        return [find_crawl(text) for text in ids]

    def create(self, org, *, name, description, json, **_):
        collection = actions.create_collection(org, name, description)
        self.say(json, collection, f"created collection {collection.name!r} in org {org.slug}")

    def add(self, org, *, name, crawls, json, **_):
        collection = self.named(org, name)
        self.say(json, collection, actions.add_to_collection(collection, self.crawls_of(org, crawls)))

    def remove(self, org, *, name, crawls, json, **_):
        collection = self.named(org, name)
        self.say(json, collection, actions.remove_from_collection(collection, self.crawls_of(org, crawls)))

    def delete(self, org, *, name, json, **_):
        collection = self.named(org, name)
        summary = collection.summary()
        message = actions.delete_collection(collection)
        self.write_json({"message": message, "collection": summary}) if json else self.stdout.write(message)

    def link(self, org, *, name, revoke, json, **_):
        collection = self.named(org, name)
        if revoke:
            self.say(json, collection, actions.close_collection_link(collection))
            return
        url = public_link(actions.open_collection_link(collection))
        if json:
            self.write_json({"url": url, "collection": collection.summary()})
        else:
            self.stdout.write(f"public link of collection {collection.name!r} (shown once; "
                              f"any older link stops working):\n{url}")

    def say(self, json: bool, collection: Collection, message: str) -> None:
        if json:
            self.write_json({"message": message, "collection": collection.summary()})
        else:
            self.stdout.write(message)

    def list(self, org, *, json, **_):
        rows = list(org.collections.order_by("name"))
        if json:
            self.write_json([c.summary() for c in rows])
            return
        now = db_now()
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("NAME", "CRAWLS", "FILES", "SIZE", "PUBLIC LINK", "AGE", "DESCRIPTION"):
            table.add_column(column, no_wrap=column != "DESCRIPTION")
        for c in rows:
            files = list(c.files().values_list("size", flat=True))
            table.add_row(c.name, str(c.crawls.count()), str(len(files)), human_size(sum(files)),
                          "yes" if c.link_hash else "no", age(c.created_at, now), c.description)
        self.render(table)

    def show(self, org, *, name, json, **_):
        collection = self.named(org, name)
        if json:
            self.write_json(collection.summary())
            return
        now = db_now()
        table = Table(box=None, header_style="bold", pad_edge=False, title=collection.name)
        for column in ("CRAWL", "STATUS", "FILES", "SIZE", "AGE", "SEED"):
            table.add_column(column, no_wrap=True)
        for crawl in collection.crawls.order_by("created_at"):
            sizes = list(crawl.files.values_list("size", flat=True))
            table.add_row(crawl.short_id, crawl.status, str(len(sizes)), human_size(sum(sizes)),
                          age(crawl.created_at, now), crawl.seeds[0] if crawl.seeds else "")
        self.render(table)
        self.stdout.write(collection.description)
