"""Deduplication in archiver's database: kept WACZs indexed (payload digests, first holder
wins; the archives they require), the digests handed to a crawler in Redis, replay loading
what a crawl requires, and the dependency rules on deletion and expiry."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest
import redis
from archiver_crawler.dedup import KnownPayloads
from archiver_crawler.wacz import build_wacz
from archiver_crawler.warc import Exchange, WarcFile
from django.utils import timezone

from archiver import conf
from archiver.errors import ActionRefused
from crawls import actions, dedup, retention
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, CrawlStatus, FileDependency, Org, PayloadDigest

pytestmark = pytest.mark.django_db
WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def exchange(url: str, body: bytes) -> Exchange:
    return Exchange(url=url, method="GET", request_target="/", request_headers=[("Host", "x")],
                    http_version="HTTP/1.1", status=200, reason="OK",
                    response_headers=[("Content-Type", "text/html")], body=body, date=WHEN)


def kept_wacz(data_dir: Path, crawl: Crawl, pages: dict[str, bytes | Exchange],
              known: KnownPayloads | None = None, name: str = "coll") -> CrawlFile:
    """A real WACZ written by archiver's crawler code, recorded as the crawl's kept file: a
    page is its body (a plain exchange), or its whole exchange."""
    work = data_dir / "work" / crawl.pk / "collections" / name
    warc = WarcFile(work / "archive", "i0", name)
    for url, body in pages.items():
        warc.write(body if isinstance(body, Exchange) else exchange(url, body), known)
    warc.close()
    wacz = build_wacz(work, name)
    relative = f"archives/{crawl.pk}/{name}.wacz"
    target = data_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    wacz.rename(target)
    data = target.read_bytes()
    return CrawlFile.objects.create(crawl=crawl, path=relative, size=len(data),
                                    sha256=hashlib.sha256(data).hexdigest())


def finished_crawl(schedule=None) -> Crawl:
    crawl = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=["http://x/"]),
                         schedule=schedule)
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE,
                                             finished_at=timezone.now() - dt.timedelta(days=30))
    crawl.refresh_from_db()
    return crawl


@pytest.fixture
def two_crawls(conf_data_dir, redis_url):
    """A first crawl kept and indexed, and a second deduplicated against it."""
    first, second = finished_crawl(), finished_crawl()
    first_file = kept_wacz(conf_data_dir, first, {"http://x/a": b"same", "http://x/b": b"old"})
    assert dedup.index_pending(conf.get()) == 1
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert dedup.hand_to_crawler(client, second) == 2
    entries = client.hgetall(f"{second.pk}:dedup")
    files = client.hgetall(f"{second.pk}:dedup:files")
    client.delete(f"{second.pk}:dedup", f"{second.pk}:dedup:files")
    client.close()
    known = KnownPayloads(entries, files, conf_data_dir / "work" / second.pk / "collections" / "coll")
    second_file = kept_wacz(conf_data_dir, second, {"http://x/a": b"same", "http://x/b": b"new"},
                            known)
    assert dedup.index_pending(conf.get()) == 1
    return first, first_file, second, second_file


def test_a_kept_wacz_is_indexed_once_per_payload_and_names_what_it_requires(two_crawls):
    first, first_file, second, second_file = two_crawls
    holders = dict(PayloadDigest.objects.values_list("url", "crawl_file_id"))
    # "same" stays with its first holder; the second crawl adds only its new payload.
    assert PayloadDigest.objects.count() == 3
    assert holders["http://x/a"] == first_file.pk
    assert PayloadDigest.objects.get(crawl_file=first_file, url="http://x/a").date == (
        "2026-01-02T03:04:05Z")
    assert list(FileDependency.objects.values_list("file_id", "required_id")) == [
        (second_file.pk, first_file.pk)]
    assert CrawlFile.objects.filter(payloads_indexed=False).count() == 0
    assert dedup.index_pending(conf.get()) == 0


def test_replay_of_a_deduplicated_crawl_lists_the_archive_it_requires(two_crawls):
    first, first_file, second, second_file = two_crawls
    package = dedup.replay_resources(dedup.with_required([second_file]), lambda f: f"/f/{f.pk}")
    assert [(r["path"], r["crawlId"]) for r in package["resources"]] == [
        (f"/f/{second_file.pk}", second.pk), (f"/f/{first_file.pk}", first.pk)]
    assert package["resources"][1]["hash"] == f"sha256:{first_file.sha256}"


def test_deleting_a_crawl_others_depend_on_is_refused_naming_them(two_crawls):
    first, first_file, second, second_file = two_crawls
    with pytest.raises(ActionRefused) as refused:
        actions.delete(first)
    assert second.short_id in str(refused.value)
    assert Path(conf.get().data_dir / first_file.path).exists()
    assert Crawl.objects.filter(pk=first.pk).exists()
    actions.delete(second)  # the dependent goes first; then the archive it needed may go
    actions.delete(first)
    assert not Crawl.objects.filter(pk__in=[first.pk, second.pk]).exists()


def test_expiry_keeps_an_archive_until_its_dependents_are_gone(two_crawls):
    first, first_file, second, second_file = two_crawls
    settings = conf.get().__class__(data_dir=conf.get().data_dir, retention_days=7)
    Crawl.objects.filter(pk=second.pk).update(finished_at=timezone.now())  # not expired yet
    retention.purge_expired(timezone.now(), settings=settings)
    assert Crawl.objects.filter(pk=first.pk).exists()
    Crawl.objects.filter(pk=second.pk).update(finished_at=timezone.now() - dt.timedelta(days=30))
    retention.purge_expired(timezone.now(), settings=settings)
    retention.purge_expired(timezone.now(), settings=settings)
    assert not Crawl.objects.filter(pk__in=[first.pk, second.pk]).exists()


def test_dedup_is_on_by_default_for_schedules_only():
    one_off = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=["http://x/"]))
    chosen = Crawl.create(Org.objects.get(slug="default"),
                          CrawlConfig(seeds=["http://x/"], dedup=True))
    assert (one_off.dedup_enabled, chosen.dedup_enabled) == (False, True)
    assert "dedup" not in one_off.config


def test_the_wacz_of_a_deduplicated_crawl_names_the_required_archive(two_crawls):
    first, first_file, second, second_file = two_crawls
    assert read_package(second_file)["relation"]["requires"] == [dedup.requirement(first_file)]


def browsertrix_lookup(client, own_id: str, digest: str) -> tuple[str, str, str, dict] | None:
    """What browsertrix-crawler 1.12-1.14 reads for a payload (src/util/state.ts: getHashDupe,
    then getDupeDependentCrawls for the WACZ a revisit makes its archive require):
    (refers-to URL, refers-to date, source crawl id, the requires entry)."""
    key = digest.split(":")[-1]
    source = client.hget("alldupes", key) or own_id
    value = client.hget(f"h:{source}", key)
    if value is None:
        return None
    index, date, url, size = value.split(" ")
    assert int(size) >= 0 and date.isdigit()
    entry = json.loads(client.lindex(f"c:{source}:wacz", int(index)))
    return url, date, source, {**entry, "crawlId": source}


def test_browsertrix_crawlers_get_the_orgs_payloads_in_their_own_index_layout(conf_data_dir, redis_url):
    first, other, recrawl = finished_crawl(), finished_crawl(), finished_crawl()
    early = kept_wacz(conf_data_dir, first, {"http://x/a": b"one"})
    later = kept_wacz(conf_data_dir, first, {"http://x/b": b"two", "http://x/has space": b"sp"},
                      name="later")
    elsewhere = kept_wacz(conf_data_dir, other, {"http://x/c": b"three"})
    kept_wacz(conf_data_dir, recrawl, {"http://x/d": b"its own"})
    while dedup.index_pending(conf.get()):
        pass
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.hset(f"h:{recrawl.pk}", "ownhash", "0 20260101000000 http://x/d 5")  # an earlier session's
    client.rpush("c:gone:wacz", "{}")  # a previous handing's leftovers
    assert dedup.hand_to_browsertrix(client, recrawl) == 3

    def digest_of(url):
        return PayloadDigest.objects.get(url=url).digest

    def requires(kept):
        return {"filename": dedup.requirement(kept)["filename"], "hash": f"sha256:{kept.sha256}",
                "size": kept.size}

    assert browsertrix_lookup(client, recrawl.pk, digest_of("http://x/a")) == (
        "http://x/a", "20260102030405", first.pk, {**requires(early), "crawlId": first.pk})
    assert browsertrix_lookup(client, recrawl.pk, digest_of("http://x/b")) == (
        "http://x/b", "20260102030405", first.pk, {**requires(later), "crawlId": first.pk})
    assert browsertrix_lookup(client, recrawl.pk, digest_of("http://x/c"))[2:] == (
        other.pk, {**requires(elsewhere), "crawlId": other.pk})
    assert browsertrix_lookup(client, recrawl.pk, digest_of("http://x/has space")) is None
    assert browsertrix_lookup(client, recrawl.pk, digest_of("http://x/d")) is None  # its own file
    assert client.hget(f"h:{recrawl.pk}", "ownhash")  # the crawler's own keys stay
    assert not client.exists("c:gone:wacz")
    assert client.smembers("allcrawls") == {first.pk, other.pk}
    assert dedup.hand_to_browsertrix(client, recrawl) == 3  # again: the same, nothing doubled
    assert client.llen(f"c:{first.pk}:wacz") == 2
    client.close()


def test_an_index_without_digest_prefixes_is_read_as_sha1_or_sha256_by_length():
    import io
    import zipfile

    lines = [("http://x/a", "A" * 32), ("http://x/b", "ab" * 32), ("http://x/c", "sha256:" + "cd" * 32)]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("indexes/index.cdxj", "".join(
            f"x)/ 20260102030405 {json.dumps({'url': url, 'digest': digest, 'status': '200'})}\n"
            for url, digest in lines))
    with zipfile.ZipFile(buffer) as zf:
        assert [d for d, _, _ in dedup.index_lines(zf)] == [
            "sha1:" + "A" * 32, "sha256:" + "ab" * 32, "sha256:" + "cd" * 32]


def read_package(crawl_file: CrawlFile) -> dict:
    import zipfile

    with zipfile.ZipFile(conf.get().data_dir / crawl_file.path) as zf:
        return json.loads(zf.read("datapackage.json"))


def with_package(crawl_file: CrawlFile, package, index_lines: list[str] = ()) -> None:
    """Rewrite the kept WACZ's datapackage.json (and add lines to its CDXJ index) as a
    hostile crawler could have written them."""
    import zipfile

    path = conf.get().data_dir / crawl_file.path
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    entries["datapackage.json"] = json.dumps(package).encode()
    entries["indexes/index.cdxj"] += "".join(line + "\n" for line in index_lines).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    data = path.read_bytes()
    CrawlFile.objects.filter(pk=crawl_file.pk).update(
        size=len(data), sha256=hashlib.sha256(data).hexdigest(), payloads_indexed=False)


@pytest.fixture
def stranger_file(two_crawls, conf_data_dir) -> CrawlFile:
    """A kept archive of a third crawl of the org, which the second crawl does not revisit."""
    found = kept_wacz(conf_data_dir, finished_crawl(), {"http://x/private": b"not yours"})
    assert dedup.index_pending(conf.get()) == 1
    return found


def test_an_archive_named_in_requires_but_not_revisited_is_no_dependency(two_crawls, stranger_file):
    first, first_file, second, second_file = two_crawls
    package = read_package(second_file)
    package["relation"]["requires"].append(dedup.requirement(stranger_file))
    with_package(second_file, package)
    FileDependency.objects.all().delete()
    assert dedup.index_pending(conf.get()) == 1

    # What its revisits point into stays required; the stranger is neither pinned nor replayed.
    assert list(FileDependency.objects.values_list("file_id", "required_id")) == [
        (second_file.pk, first_file.pk)]
    assert stranger_file not in dedup.with_required([second_file])
    actions.delete(stranger_file.crawl)
    assert not Crawl.objects.filter(pk=stranger_file.crawl_id).exists()


@pytest.mark.parametrize("package", [[], {"relation": []}, {"relation": {"requires": ["x", 3]}},
                                     {"relation": {"requires": [{"hash": 7}]}}])
def test_a_malformed_datapackage_is_indexed_without_dependencies(two_crawls, package):
    first, first_file, second, second_file = two_crawls
    with_package(second_file, package)
    FileDependency.objects.all().delete()
    assert dedup.index_pending(conf.get()) == 1
    assert not FileDependency.objects.exists()
    assert PayloadDigest.objects.filter(crawl_file=second_file).count() == 1


def test_index_lines_of_the_wrong_shape_are_skipped_and_the_rest_indexed():
    import io
    import zipfile

    good = json.dumps({"url": "http://x/ok", "digest": "sha1:" + "B" * 32, "status": "200"})
    lines = ["x)/ 20260102030405 [1, 2]", "x)/ 2026-bad-date " + good,
             "x)/ 20260102030405 " + json.dumps({"url": {"a": 1}, "digest": "sha1:C", "status": 200}),
             "x)/ 20260102030405 " + json.dumps({"url": "http://x/n", "digest": 7, "status": 200}),
             "x)/ 20260102030405 " + json.dumps({"url": "http://x/l", "digest": "D" * 200, "status": 200}),
             "x)/ 20260102030405 " + good]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("indexes/index.cdxj", "\n".join(lines) + "\n")
    with zipfile.ZipFile(buffer) as zf:
        assert list(dedup.index_lines(zf)) == [
            ("sha1:" + "B" * 32, "http://x/ok", "2026-01-02T03:04:05Z")]


def test_tens_of_thousands_of_requires_and_revisits_are_indexed(two_crawls, stranger_file):
    first, first_file, second, second_file = two_crawls
    package = read_package(second_file)
    package["relation"]["requires"] += [{"hash": f"sha256:{n:064x}"} for n in range(40_000)]
    package["relation"]["requires"].append(dedup.requirement(stranger_file))
    revisits = ["x)/r 20260102030405 " + json.dumps(
        {"url": f"http://x/r{n}", "mime": "warc/revisit", "digest": f"sha1:{n:032d}"})
        for n in range(40_000)]
    with_package(second_file, package, revisits)
    FileDependency.objects.all().delete()
    assert dedup.index_pending(conf.get()) == 1
    assert list(FileDependency.objects.values_list("required_id", flat=True)) == [first_file.pk]


def test_archives_that_cannot_be_read_wait_their_turn_and_do_not_hold_up_the_rest(conf_data_dir):
    crawl = finished_crawl()
    broken = []
    for n, data in enumerate([b"not a zip at all", b"PK\x03\x04" + b"\0" * 200]):
        path = f"archives/{crawl.pk}/broken-{n}.wacz"
        (conf_data_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (conf_data_dir / path).write_bytes(data)
        broken.append(CrawlFile.objects.create(crawl=crawl, path=path, size=len(data),
                                               sha256=hashlib.sha256(data).hexdigest()))
    gone = CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.pk}/gone.wacz", size=1,
                                    sha256="0" * 64)
    good = kept_wacz(conf_data_dir, finished_crawl(), {"http://x/a": b"kept"})

    assert dedup.index_pending(conf.get()) == 0  # the two oldest fail, and wait
    assert dedup.index_pending(conf.get()) == 1  # the one gone from disk fails; then the good one
    assert PayloadDigest.objects.filter(crawl_file=good).count() == 1
    waiting = CrawlFile.objects.filter(pk__in=[f.pk for f in [*broken, gone]])
    assert all(f.payloads_retry_at > timezone.now() and not f.payloads_indexed for f in waiting)
    assert dedup.index_pending(conf.get()) == 0  # nothing due until then

    CrawlFile.objects.filter(pk__in=[f.pk for f in waiting]).update(
        payloads_retry_at=timezone.now() - dt.timedelta(seconds=1))
    assert dedup.index_pending(conf.get()) == 0  # due again, failing again


def test_a_collections_download_holds_excerpts_of_the_archives_its_members_require(two_crawls):
    import io
    import zipfile

    from crawls import collection_files
    from crawls.models import Collection

    first, first_file, second, second_file = two_crawls
    collection = Collection.create(second.org, "Recrawl", now=timezone.now())
    collection.add_crawls([second])
    download = collection_files.package(collection)
    with zipfile.ZipFile(io.BytesIO(b"".join(download.read(0, download.size - 1)))) as zf:
        package = json.loads(zf.read("datapackage.json"))
        names = zf.namelist()
        excerpt = zf.read(package["resources"][1]["path"])
    # The first archive's records the recrawl revisits, not the first archive (crawls/excerpts.py).
    assert [(r["crawlId"], r["hash"]) for r in package["resources"]] == [
        (second.pk, f"sha256:{second_file.sha256}"), (first.pk, f"sha256:{hashlib.sha256(excerpt).hexdigest()}")]
    assert excerpt != (conf.get().data_dir / first_file.path).read_bytes()
    # The name the recrawl's datapackage.json requires is the name the package gives it.
    assert package["resources"][1]["name"] == read_package(second_file)["relation"]["requires"][0]["filename"]
    assert all(r["path"] in names for r in package["resources"])
