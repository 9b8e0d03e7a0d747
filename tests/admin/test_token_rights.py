"""Who may make an API token for whom, and who may change an org's quotas, in the admin."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from crawls.models import ApiToken, Org

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]


def staff(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password="a-long-passphrase-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="crawls", codename__in=codenames))
    return user


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", password="a-long-passphrase-2")


@pytest.fixture
def clerk(client, root) -> User:
    user = staff("clerk", "add_apitoken", "view_apitoken")
    client.force_login(user)
    return user


def token_form(user_pk: int) -> dict:
    return {"user": str(user_pk), "name": "mine", "org": "", "rate_limit": "600"}


def user_choices(page: str) -> list[str]:
    select = re.search(r'<select name="user".*?</select>', page, re.S).group()
    return [value for value in re.findall(r'<option value="([^"]*)"', select) if value]


def test_the_token_form_offers_a_staff_user_only_themselves(client, clerk, root):
    page = client.get(reverse("admin:crawls_apitoken_add")).content.decode()
    assert user_choices(page) == [str(clerk.pk)]


def test_a_forged_token_form_for_the_superuser_makes_no_token(client, clerk, root):
    response = client.post(reverse("admin:crawls_apitoken_add"), token_form(root.pk))
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_a_staff_user_makes_a_token_for_themselves(client, clerk):
    response = client.post(reverse("admin:crawls_apitoken_add"), token_form(clerk.pk))
    assert response.status_code == 302
    assert ApiToken.objects.get().user == clerk


def test_a_superuser_makes_tokens_for_anyone(client, root):
    alice = staff("alice")
    client.force_login(root)
    assert client.post(reverse("admin:crawls_apitoken_add"), token_form(alice.pk)).status_code == 302
    assert ApiToken.objects.get().user == alice


def test_a_staff_user_sees_only_their_own_tokens(client, clerk, root):
    ApiToken.issue(root, "root's")
    ApiToken.issue(clerk, "clerk's")
    page = client.get(reverse("admin:crawls_apitoken_changelist")).content.decode()
    assert "clerk&#x27;s" in page and "root&#x27;s" not in page


def org_form(**quotas) -> dict:
    return {"slug": "acme", "name": "Acme renamed", "max_concurrent_crawls": "", "storage_quota_bytes": "",
            "exec_minutes_quota": "", "max_pages_per_crawl": "", **quotas}


def test_changing_an_org_does_not_include_changing_its_quotas(client):
    org = Org.objects.create(slug="acme", name="Acme", max_concurrent_crawls=1, max_pages_per_crawl=10)
    client.force_login(staff("manager", "view_org", "change_org"))
    url = reverse("admin:crawls_org_change", args=[org.pk])
    page = client.get(url).content.decode()
    assert 'name="max_concurrent_crawls"' not in page and 'name="name"' in page
    assert client.post(url, org_form(max_concurrent_crawls="50", max_pages_per_crawl="")).status_code == 302
    org.refresh_from_db()
    assert (org.name, org.max_concurrent_crawls, org.max_pages_per_crawl) == ("Acme renamed", 1, 10)


def test_the_quota_right_changes_quotas(client):
    org = Org.objects.create(slug="acme", name="Acme", max_concurrent_crawls=1)
    client.force_login(staff("treasurer", "view_org", "change_org", "change_org_quotas"))
    url = reverse("admin:crawls_org_change", args=[org.pk])
    assert client.post(url, org_form(max_concurrent_crawls="5")).status_code == 302
    org.refresh_from_db()
    assert org.max_concurrent_crawls == 5
