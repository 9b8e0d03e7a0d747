"""Which pages a crawl records, for each scope type, depth, limit, extra hops and robots.txt."""

from __future__ import annotations


def test_a_prefix_crawl_records_every_page_under_the_seed_path(crawl, site, r):
    code, coll = crawl(site.url)
    assert code == 0
    assert coll.page_urls == site.expected_pages("prefix")
    assert r.scard("crawl1:s") == len(site.expected_pages("prefix"))


def test_prefix_is_the_default_and_redirect_targets_are_pages_at_the_same_depth(crawl, site):
    _, coll = crawl(site.url)
    depths = {p["url"]: p["depth"] for p in coll.pages}
    statuses = {p["url"]: p["status"] for p in coll.pages}
    assert depths[site.root + "/site/target.html"] == 1
    assert statuses[site.root + "/site/moved"] == 301
    assert statuses[site.root + "/site/temp"] == 302
    assert statuses[site.root + "/site/missing.html"] == 404
    assert statuses[site.root + "/site/error.html"] == 500


def test_a_page_crawl_records_only_the_seed(crawl, site):
    _, coll = crawl(site.url, "--scopeType", "page")
    assert coll.page_urls == site.expected_pages("page") == {site.url}


def test_page_spa_is_the_seed_alone_without_a_browser(crawl, site):
    _, coll = crawl(site.url, "--scopeType", "page-spa")
    assert coll.page_urls == {site.url}


def test_a_host_crawl_adds_the_other_paths_of_the_host(crawl, site):
    _, coll = crawl(site.url, "--scopeType", "host")
    assert coll.page_urls == site.expected_pages("host")


def test_an_any_crawl_tries_the_external_link_and_lists_it_as_failed(crawl, site, r):
    _, coll = crawl(site.url, "--scopeType", "any")
    assert coll.page_urls == site.expected_pages("host")
    failed = [p["url"] for p in map(__import__("json").loads, r.lrange("crawl1:f", 0, -1))]
    assert failed == [site.external_url]


def test_domain_scope_on_an_address_is_the_host(crawl, site):
    _, coll = crawl(site.url, "--scopeType", "domain")
    assert coll.page_urls == site.expected_pages("host")


def test_depth_limits_the_link_distance_from_the_seed(crawl, site):
    _, coll = crawl(site.url, "--depth", "1")
    assert coll.page_urls == site.expected_pages("prefix", depth=1)
    assert max(p["depth"] for p in coll.pages) == 1


def test_depth_zero_is_the_seed_only(crawl, site):
    _, coll = crawl(site.url, "--depth", "0")
    assert coll.page_urls == {site.url}


def test_the_page_limit_caps_the_seen_set(crawl, site, r):
    _, coll = crawl(site.url, "--limit", "5", "--workers", "3")
    assert len(coll.pages) == 5
    assert r.scard("crawl1:s") == 5
    assert r.get("crawl1:d") == "5"


def test_extra_hops_reach_one_link_beyond_the_scope(crawl, site):
    _, coll = crawl(site.url, "--scopeType", "page", "--extraHops", "1")
    depth_one = {u for u in site.expected_pages("host", depth=1)}
    assert coll.page_urls == depth_one


def test_exclusions_drop_matching_pages(crawl, site):
    _, coll = crawl(site.url, "--exclude", r"/site/a\d?\.html$")
    expected = site.expected_pages("prefix") - {
        site.root + p for p in ("/site/a.html", "/site/a1.html", "/site/a2.html")}
    assert coll.page_urls == expected


def test_an_include_without_scope_type_is_a_custom_scope(crawl, site):
    _, coll = crawl(site.url, "--include", r"/site/b")
    assert coll.page_urls == {site.url, site.root + "/site/b.html", site.root + "/site/b1.html"}


def test_robots_txt_is_honoured_with_use_robots(crawl, site):
    _, coll = crawl(site.url, "--useRobots")
    assert coll.page_urls == site.expected_pages("prefix", robots=True)
    assert site.requests["/site/private/secret.html"] == 0


def test_robots_txt_is_ignored_without_use_robots(crawl, site):
    _, coll = crawl(site.url)
    assert site.root + "/site/private/secret.html" in coll.page_urls
    assert site.requests["/robots.txt"] == 0


def test_a_config_file_gives_seeds_and_scope_and_the_command_line_wins(crawl, site, tmp_path):
    config = tmp_path / "crawl.yaml"
    config.write_text(f"seeds:\n  - {site.url}\nscopeType: host\ndepth: 0\n")
    _, coll = crawl(site.url, "--config", str(config), "--depth", "1")
    assert coll.page_urls == site.expected_pages("host", depth=1)


def test_a_seed_redirecting_out_of_scope_becomes_an_extra_seed(crawl, site, r):
    _, coll = crawl(site.root + "/site/moved", "--scopeType", "page")
    assert coll.page_urls == {site.root + "/site/moved", site.root + "/site/target.html"}
    assert r.llen("crawl1:extraSeeds") == 1
