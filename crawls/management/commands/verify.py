"""`archiver verify FILE|CRAWL|COLLECTION [--json]`: each archive's files against its
datapackage.json, the digest and the signature; exit 1 when anything does not hold."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError
from rich.table import Table
from rich.text import Text

from archiver import conf
from crawls import wacz_auth
from crawls.actions import ActionRefused, find_collection
from crawls.cli import ArchiverCommand, find_crawl
from crawls.models import Collection, Org

MARK = {True: ("holds", "green"), False: ("FAILS", "bold red"), None: ("-", "dim")}


class Command(ArchiverCommand):
    help = ("Verify archives: every file's sha256 against datapackage.json, datapackage.json "
            "against datapackage-digest.json, and the signature (wacz-auth). Exit 1 when "
            "anything does not hold. A crawl's or a collection's archives have the result kept.")

    def add_arguments(self, parser):
        parser.add_argument("target", metavar="FILE|CRAWL|COLLECTION",
                            help="a .wacz file, a crawl id (a unique prefix will do), or a collection's name")
        parser.add_argument("--org", default="default", metavar="SLUG",
                            help="the org of a collection named (default: default)")
        parser.add_argument("--json", action="store_true", help="machine-readable")

    def run(self, *, target, org, json, **options):
        settings = conf.get()
        known = wacz_auth.known_keys(settings.data_dir)
        reports = self.reports(target, org, settings)
        if json:
            self.write_json([report.summary(known) for report in reports])
        else:
            for report in reports:
                self.show(report, known)
        failed = [report.name for report in reports if not report.ok]
        if failed:
            raise CommandError(f"{len(failed)} of {len(reports)} archive(s) do not verify: "
                               + ", ".join(failed[:10]), returncode=1)

    def reports(self, target: str, org: str, settings) -> list[wacz_auth.Report]:
        path = Path(target)
        if target.endswith(".wacz") or path.is_file():
            if not path.is_file():
                raise CommandError(f"no file {target}")
            return [wacz_auth.verify(path)]
        from crawls import provenance  # noqa: PLC0415 (the Django side; a file needs none of it)

        files = self.kept_files(target, org, provenance)
        if not files:
            raise CommandError(f"{target}: no archive files kept yet")
        return [provenance.verify_file(f, settings) for f in files]

    def kept_files(self, target: str, org: str, provenance):
        owner = Org.objects.filter(slug=org).first()
        collection = None
        if owner is not None:
            try:
                collection = find_collection(Collection.objects.filter(org=owner), target)
            except ActionRefused:
                collection = None
        if collection is not None:
            return provenance.collection_files(collection)
        if not all(c in "0123456789abcdef" for c in target.strip().lower()):
            raise CommandError(f"{target!r} is no file, crawl id, or collection of org {org!r}")
        return provenance.crawl_files(find_crawl(target))

    def show(self, report: wacz_auth.Report, known: list[str]) -> None:
        verdict = Text(f"{report.name}: ", style="bold")
        verdict.append("verified" if report.ok and report.signed else
                       "hashes hold, not signed" if report.ok else "DOES NOT VERIFY",
                       style="green" if report.ok else "bold red")
        if report.signed:
            verdict.append(f" — signed by {report.signer_words(known)}"
                           + (f" at {report.created}" if report.created else ""))
        table = Table(box=None, header_style="bold", pad_edge=False, show_header=False)
        table.add_column("", no_wrap=True)
        table.add_column("", overflow="fold")
        for check in report.checks:
            word, style = MARK[check.ok]
            table.add_row(Text(word, style=style), check.said)
        self.render(verdict, table)
