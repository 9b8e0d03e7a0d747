"""Browser profiles: `archiver profile add|list|remove`, what a profile archive may hold, where
and how privately it is kept, and when it may be removed."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from archiver import conf
from archiver.errors import ConfigError
from crawls.config import CrawlConfig
from crawls.models import BrowserProfile, Crawl, CrawlStatus, Org, Schedule
from crawls.profiles import ProfileLimits, add_profile, profile_path
from tests.profile_tars import good_profile, member, write_tar_gz

pytestmark = pytest.mark.django_db


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A data dir of this test's own, and a crawler that takes browser options."""
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("ARCHIVER_DATA_DIR", str(path))
    monkeypatch.setenv("ARCHIVER_CRAWLER_KIND", "browsertrix")
    conf.get.cache_clear()
    yield path
    conf.get.cache_clear()


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def refusal(*args) -> str:
    with pytest.raises(CommandError) as refused:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    return str(refused.value)


def org_files(data_dir) -> list[str]:
    folder = data_dir / "profiles"
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_a_profile_is_kept_privately_under_its_org_with_its_hash(data_dir, tmp_path):
    source = good_profile(tmp_path / "login.tar.gz")
    out = run("profile", "add", "news-login", str(source))
    assert out.startswith("added browser profile news-login to org default")
    profile = BrowserProfile.objects.get()
    org = Org.objects.get(slug="default")
    kept = profile_path(data_dir, org.pk, "news-login")
    assert kept.read_bytes() == source.read_bytes()
    assert profile.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert profile.size_bytes == source.stat().st_size
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(kept.parent.parent.stat().st_mode) == 0o700
    assert org_files(data_dir) == [str(org.pk), f"{org.pk}/news-login.tar.gz"]  # no temp file left


def test_the_list_shows_names_sizes_and_hashes_never_paths_or_contents(data_dir, tmp_path):
    Org.objects.create(slug="acme")
    source = good_profile(tmp_path / "p.tar.gz", cookie=b"session=TOP-SECRET")
    run("profile", "add", "a", str(source))
    run("profile", "add", "b", str(source), "--org", "acme")
    listed = json.loads(run("profile", "list", "--json"))
    assert [(p["org"], p["name"]) for p in listed] == [("acme", "b"), ("default", "a")]
    assert set(listed[0]) == {"org", "name", "sha256", "size_bytes", "created_at"}
    assert [p["name"] for p in json.loads(run("profile", "list", "--org", "acme", "--json"))] == ["b"]
    table = run("profile", "list")
    assert "acme" in table and "default" in table
    for text in (table, json.dumps(listed)):
        assert "TOP-SECRET" not in text and str(data_dir) not in text


def test_a_name_is_taken_once_per_org(data_dir, tmp_path):
    source = good_profile(tmp_path / "p.tar.gz")
    Org.objects.create(slug="acme")
    run("profile", "add", "login", str(source))
    run("profile", "add", "login", str(source), "--org", "acme")  # another org: fine
    assert refusal("profile", "add", "login", str(source)) == (
        "org 'default' has a browser profile 'login' already (remove it first)")
    assert BrowserProfile.objects.count() == 2


@pytest.mark.parametrize(("name", "words"), [
    ("../up", "is not a profile name"),
    ("a/b", "is not a profile name"),
    ("_under", "is not a profile name"),
    ("x" * 65, "is not a profile name"),
    ("with space", "is not a profile name"),
])
def test_names_are_plain(data_dir, tmp_path, name, words):
    assert words in refusal("profile", "add", name, str(good_profile(tmp_path / "p.tar.gz")))
    assert not BrowserProfile.objects.exists() and org_files(data_dir) in ([], ["1"])


HOSTILE = {
    "absolute name": ([member("/etc/cron.d/evil", data=b"x")], "unsafe member name '/etc/cron.d/evil'"),
    "dot-dot name": ([member("Default/../../evil", data=b"x")], "unsafe member name"),
    "dot-dot at the start": ([member("../evil", data=b"x")], "unsafe member name"),
    "absolute symlink": ([member("Default/link", tarfile.SYMTYPE, link="/etc/shadow")],
                         "link 'Default/link' points outside the profile"),
    "escaping symlink": ([member("Default/link", tarfile.SYMTYPE, link="../../home")],
                         "points outside the profile"),
    "escaping hard link": ([member("Default/hard", tarfile.LNKTYPE, link="../outside")],
                           "hard link 'Default/hard' points outside"),
    "absolute hard link": ([member("hard", tarfile.LNKTYPE, link="/etc/passwd")], "points outside"),
    "character device": ([member("null", tarfile.CHRTYPE)], "is a device or FIFO"),
    "block device": ([member("disk", tarfile.BLKTYPE)], "is a device or FIFO"),
    "fifo": ([member("pipe", tarfile.FIFOTYPE)], "is a device or FIFO"),
    "empty": ([], "the profile archive is empty"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_nothing_is_kept(data_dir, tmp_path, case):
    members, words = HOSTILE[case]
    source = write_tar_gz(tmp_path / "hostile.tar.gz", [member("Default/", tarfile.DIRTYPE), *members]
                          if case != "empty" else [])
    message = refusal("profile", "add", "p", str(source))
    assert words in message
    assert not BrowserProfile.objects.exists()
    assert not [name for name in org_files(data_dir) if name.endswith((".tmp", ".tar.gz"))]


def test_files_that_are_not_gzip_tars_are_refused(data_dir, tmp_path):
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as archive:
        archive.add(good_profile(tmp_path / "inner.tar.gz"), arcname="x")
    assert refusal("profile", "add", "p", str(plain)).endswith("is not a gzip file (a browser profile is a .tar.gz)")
    text = tmp_path / "notes.gz"
    import gzip

    text.write_bytes(gzip.compress(b"not a tar archive at all, just text " * 50))
    assert "is not a readable tar.gz archive" in refusal("profile", "add", "p", str(text))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good_profile(tmp_path / "whole.tar.gz").read_bytes()[:60])
    assert "is not a readable tar.gz archive" in refusal("profile", "add", "p", str(cut))
    assert "cannot read" in refusal("profile", "add", "p", str(tmp_path / "missing.tar.gz"))
    assert "is not a regular file" in refusal("profile", "add", "p", str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "is not a regular file" in refusal("profile", "add", "p", str(fifo))  # never blocks
    assert not BrowserProfile.objects.exists()


def test_size_member_and_unpacked_limits(data_dir, tmp_path):
    org = Org.objects.get(slug="default")
    many = write_tar_gz(tmp_path / "many.tar.gz", [member(f"f{i}", data=b"x") for i in range(20)])
    big = write_tar_gz(tmp_path / "big.tar.gz", [member("zeros", data=b"\0" * 100_000)])
    cases = [
        (many, ProfileLimits(members=10), "more than 10 files"),
        (big, ProfileLimits(unpacked_bytes=50_000), "unpacks to more than 50.0 KB"),
        (big, ProfileLimits(file_bytes=100), "a browser profile may be at most 100 B"),
    ]
    for source, limits, words in cases:
        with pytest.raises(ConfigError) as refused:
            add_profile(org, "p", source, data_dir, timezone.now(), limits=limits)
        assert words in str(refused.value)
    assert not BrowserProfile.objects.exists()
    assert org_files(data_dir) == [str(org.pk)]


def test_a_profile_used_by_an_active_crawl_or_a_schedule_is_not_removed(data_dir, tmp_path):
    run("profile", "add", "login", str(good_profile(tmp_path / "p.tar.gz")))
    org = Org.objects.get(slug="default")
    crawl = Crawl.create(org, CrawlConfig.parse(seeds=["https://example.com/"], profile="login"))
    message = refusal("profile", "remove", "login")
    assert message == (f"browser profile 'login' is used by crawl {crawl.short_id}; "
                       "remove it once they are finished (or deleted)")
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    schedule = Schedule.objects.create(org=org, cron="0 3 * * *", config={**crawl.config})
    assert f"is used by schedule {schedule.pk}" in refusal("profile", "remove", "login")
    assert BrowserProfile.objects.count() == 1
    schedule.delete()
    assert run("profile", "remove", "login").strip() == "removed browser profile login from org default"
    assert not BrowserProfile.objects.exists()
    assert not profile_path(data_dir, org.pk, "login").exists()
    assert refusal("profile", "remove", "login") == (
        "no browser profile 'login' in org 'default' (see: archiver profile list)")


def test_a_crawl_naming_a_missing_profile_is_refused_at_add_time(data_dir, tmp_path):
    assert refusal("add", "https://example.com/", "--profile", "login") == (
        "no browser profile 'login' in org 'default' (add it with: archiver profile add login FILE "
        "--org default)")
    Org.objects.create(slug="acme")
    run("profile", "add", "login", str(good_profile(tmp_path / "p.tar.gz")), "--org", "acme")
    assert "no browser profile 'login' in org 'default'" in refusal("add", "https://example.com/",
                                                                    "--profile", "login")
    assert not Crawl.objects.exists()
    crawl_id = run("add", "https://example.com/", "--profile", "login", "--org", "acme").strip()
    assert Crawl.objects.get(pk=crawl_id).config["profile"] == "login"
    assert "no browser profile" in refusal("schedule", "add", "0 3 * * *", "https://example.com/",
                                           "--profile", "login")


def test_an_org_with_profiles_is_not_deleted(data_dir, tmp_path):
    Org.objects.create(slug="acme")
    run("profile", "add", "login", str(good_profile(tmp_path / "p.tar.gz")), "--org", "acme")
    assert refusal("org", "delete", "acme") == (
        "org acme still has 1 browser profile(s): remove them first (archiver profile remove NAME --org acme)")
    run("profile", "remove", "login", "--org", "acme")
    run("org", "delete", "acme")
    assert not Org.objects.filter(slug="acme").exists()


def test_an_unknown_org_is_refused(data_dir, tmp_path):
    assert refusal("profile", "add", "p", str(good_profile(tmp_path / "p.tar.gz")), "--org", "nope") == (
        "no org 'nope' (create it with: archiver org set nope)")
