"""`archiver reindex [CRAWL]`: index again the page text of every kept archive (of one crawl),
now, in this process; the daemon indexes new archives by itself (runner/indexing.py)."""

from __future__ import annotations

from django.utils import timezone

from archiver import conf
from crawls import storage
from crawls.cli import ArchiverCommand
from crawls.models import Crawl, CrawlFile, PageText
from runner import indexing


class Command(ArchiverCommand):
    help = "Index the page text of the kept archives again (all crawls, or one) for search."

    def add_arguments(self, parser):
        parser.add_argument("crawl", nargs="?", metavar="CRAWL", help="a crawl id or a prefix")

    def run(self, *, crawl, **options):
        files = CrawlFile.objects.all()
        if crawl is not None:
            files = files.filter(crawl=Crawl.objects.by_prefix(crawl))
        ids = list(files.values_list("pk", flat=True))
        CrawlFile.objects.filter(pk__in=ids).reindex()
        settings = conf.get()
        store = storage.object_store(settings)
        chosen = CrawlFile.objects.filter(pk__in=ids)
        while indexing.index_next(settings.data_dir, timezone.now(), files=chosen.to_index(timezone.now()),
                                  store=store):
            pass
        unread = list(chosen.filter(indexed_at__isnull=True).values_list("path", "index_error"))
        pages = PageText.objects.filter(file_id__in=ids).count()
        self.stdout.write(f"indexed {len(ids) - len(unread)} of {len(ids)} archive(s), {pages} page(s)"
                          + (f"; {len(unread)} could not be read:" if unread else ""))
        for path, error in unread:
            self.stdout.write(f"  {path}: {error or 'unreadable'}")
