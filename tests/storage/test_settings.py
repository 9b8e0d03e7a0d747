"""ARCHIVER_STORAGE_*: validated once like every setting, with no secret in any message."""

from __future__ import annotations

import pytest

from archiver.conf import from_environ
from archiver.errors import ConfigError

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def env(**more) -> dict[str, str]:
    return {"ARCHIVER_DATA_DIR": "/tmp/archiver-settings-test", "ARCHIVER_STORAGE_URL": "s3://archives/a/b/",
            "ARCHIVER_STORAGE_ENDPOINT": "http://127.0.0.1:9000/", "ARCHIVER_STORAGE_ACCESS_KEY": "AKIDEXAMPLE",
            "ARCHIVER_STORAGE_SECRET_KEY": SECRET, **more}


def test_unset_storage_keeps_archives_in_the_data_dir():
    settings = from_environ({"ARCHIVER_DATA_DIR": "/tmp/x"})
    assert settings.s3 is None
    assert from_environ({"ARCHIVER_DATA_DIR": "/tmp/x", "ARCHIVER_STORAGE_URL": "/tmp/x/"}).s3 is None


def test_a_bucket_url_gives_the_target():
    target = from_environ(env()).s3
    assert (target.endpoint, target.bucket, target.prefix, target.region) == (
        "http://127.0.0.1:9000", "archives", "a/b", "us-east-1")
    assert target.root == "s3://archives" and target.crawl_prefix("c1") == "a/b/c1/"
    assert from_environ(env(ARCHIVER_STORAGE_URL="s3://archives")).s3.crawl_prefix("c1") == "c1/"
    assert (target.crawler_access_key, target.crawler_secret_key) == ("AKIDEXAMPLE", SECRET)
    assert SECRET not in repr(target) and SECRET not in repr(from_environ(env()))


@pytest.mark.parametrize("changes, message", [
    ({"ARCHIVER_STORAGE_URL": "s3://Bad_Bucket"}, "ARCHIVER_STORAGE_URL: 'Bad_Bucket' is not an S3 bucket name"),
    ({"ARCHIVER_STORAGE_URL": "s3://archives/a/../b"}, "ARCHIVER_STORAGE_URL: the prefix"),
    ({"ARCHIVER_STORAGE_URL": "ftp://elsewhere"}, "ARCHIVER_STORAGE_URL: must be s3://bucket[/prefix]"),
    ({"ARCHIVER_STORAGE_ENDPOINT": "ftp://host"}, "ARCHIVER_STORAGE_ENDPOINT: must be http(s)://host[:port]"),
    ({"ARCHIVER_STORAGE_ENDPOINT": "http://host/path"}, "ARCHIVER_STORAGE_ENDPOINT: must be"),
    ({"ARCHIVER_STORAGE_ENDPOINT": "http://user:pw@host"}, "ARCHIVER_STORAGE_ENDPOINT: must be"),
    ({"ARCHIVER_STORAGE_ENDPOINT": ""}, "needs ARCHIVER_STORAGE_ENDPOINT"),
    ({"ARCHIVER_STORAGE_SECRET_KEY": ""}, "needs ARCHIVER_STORAGE_SECRET_KEY"),
    ({"ARCHIVER_STORAGE_REGION": "Mars One"}, "ARCHIVER_STORAGE_REGION"),
    ({"ARCHIVER_STORAGE_CRAWLER_ACCESS_KEY": "x"}, "go together"),
])
def test_bad_storage_settings_name_the_variable_and_never_the_secret(changes, message):
    with pytest.raises(ConfigError) as refused:
        from_environ(env(**changes))
    assert message in str(refused.value)
    assert SECRET not in str(refused.value)
