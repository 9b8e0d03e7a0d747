"""The admin's import page: an archive past the 2.5 MB body cap uploaded and imported (the
crawl's page follows), a hostile one refused in words with nothing left, and no page for a
user who may not add crawls (issue 43)."""

from __future__ import annotations

import gzip

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from crawls.models import Crawl, CrawlOrigin
from tests.api.test_imports import page_warc
from tests.test_import import assert_nothing_left, warc_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]
URL = "/admin/crawls/crawl/import/"


def test_the_import_page_has_its_address_and_a_form(admin_client, conf_data_dir):
    assert reverse("admin:crawls_crawl_import") == URL
    page = admin_client.get(URL).content.decode()
    assert 'enctype="multipart/form-data"' in page and 'name="archive"' in page


def test_an_archive_past_the_body_cap_is_imported_and_its_crawl_shown(admin_client, conf_data_dir):
    body = page_warc("medlars") + warc_record(b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1))
    response = admin_client.post(URL, {"org": "default",
                                       "archive": SimpleUploadedFile("site.warc", body)})
    crawl = Crawl.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/{crawl.pk}/change/")
    assert (crawl.origin, crawl.pages_done) == (CrawlOrigin.IMPORT, 1)
    shown = admin_client.get(response["Location"])
    assert shown.status_code == 200 and crawl.short_id in shown.content.decode()
    assert admin_client.get(f"/admin/crawls/crawl/{crawl.pk}/replay/?url=http://upload.test/").status_code == 200
    assert admin_client.get("/admin/crawls/crawl/").status_code == 200
    assert list((conf_data_dir / "imports").iterdir()) == []


def test_a_hostile_upload_is_refused_in_words_and_leaves_nothing(admin_client, conf_data_dir):
    cut = gzip.compress(warc_record(b"x" * 5000))[:-30]
    response = admin_client.post(URL, {"org": "default",
                                       "archive": SimpleUploadedFile("cut.warc.gz", cut)})
    assert response.status_code == 200
    assert "Not imported: cut.warc.gz: its gzip is cut short" in response.content.decode()
    assert_nothing_left(conf_data_dir)


def test_a_user_who_may_not_add_crawls_gets_no_import_page(client, log_in_staff, conf_data_dir):
    log_in_staff(codename="view_crawl")
    assert client.get(URL).status_code == 403
    assert client.post(URL, {"org": "default"}).status_code == 403
