"""`archiver files ID [--json]`: a crawl's archive files, where they are and their checksums."""

from __future__ import annotations

from archiver import conf
from crawls import storage
from crawls.cli import ArchiverCommand
from crawls.models import Crawl


class Command(ArchiverCommand):
    help = "List the WACZ files of a crawl as `sha256  path` lines (--json adds sizes)."

    def add_arguments(self, parser):
        parser.add_argument("id", metavar="ID", help="a crawl id or a unique prefix of it")
        parser.add_argument("--json", action="store_true", help="print the files as JSON")

    def run(self, *, id, json, **options):
        crawl = Crawl.objects.by_prefix(id)
        root = conf.get().data_dir
        files = list(crawl.files.order_by("created_at"))
        if json:
            self.write_json([{**f.summary(), "full_path": where(root, f)} for f in files])
            return
        if not files:
            self.stdout.write(f"crawl {crawl.short_id}: no files yet")
            return
        # The format of sha256sum, so `archiver files ID | sha256sum -c` checks the archive.
        for crawl_file in files:
            self.stdout.write(f"{crawl_file.sha256}  {where(root, crawl_file)}")


def where(root, crawl_file) -> str:
    """The file under the data dir, or s3://<bucket>/<key> for an object."""
    if storage.is_object(crawl_file):
        return f"{crawl_file.root}/{crawl_file.path}"
    return str(root / crawl_file.path)
