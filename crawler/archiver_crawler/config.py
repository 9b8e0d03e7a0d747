"""Command line and config file parsing, with the real crawler's option names.

Precedence: built-in defaults < config file (`--config`, YAML or JSON, same keys) < command line.
Anything invalid raises ConfigError, which the entry point turns into exit code 4.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from archiver_crawler import __version__
from archiver_crawler.errors import ConfigError
from archiver_crawler.hosts import Rates, host_options
from archiver_crawler.netpolicy import IPNetwork, parse_networks, split_networks
from archiver_crawler.upload import Store, store_from_env

MAX_SEED_FILE = 16 * 2**20  # a seed file's bytes: 100,000 long URLs
SCOPE_TYPES = ("page", "page-spa", "prefix", "host", "domain", "any", "custom")
COLLECTION_RE = re.compile(r"^[\w][\w-]*$")
DEFAULT_USER_AGENT = f"Mozilla/5.0 (compatible; archiver-crawler/{__version__})"


@dataclass(frozen=True)
class SeedSpec:
    """One seed as configured: its URL and its own scope settings (None = crawl-wide value)."""

    url: str
    scope_type: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    depth: int | None = None
    extra_hops: int | None = None


# The real crawler's values; the behaviors archiver's browser mode runs are BROWSER_BEHAVIORS,
# the others are accepted (a crawl configured for either crawler runs) and skipped with a warning.
BEHAVIORS = ("autoscroll", "autoplay", "autofetch", "autoclick", "siteSpecific")
BROWSER_BEHAVIORS = ("autoscroll", "autoplay")
WAIT_UNTIL = ("load", "domcontentloaded", "networkidle0", "networkidle2")
SCREENSHOTS = ("view", "thumbnail", "fullPage", "fullPageFinal")
TEXT_MODES = ("to-pages", "to-warc", "final-to-warc")
# Given without --browser, these are an error: they mean nothing to an HTTP fetch.
BROWSER_ONLY = ("waitUntil", "postLoadDelay", "behaviors", "behaviorTimeout", "screenshot",
                "lang", "chromium")
LANG_RE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$")


@dataclass(frozen=True)
class BrowserConfig:
    chromium: str
    wait_until: tuple[str, ...] = ("load", "networkidle2")
    post_load_delay: float = 0.0
    behaviors: tuple[str, ...] = ()
    behavior_timeout: float = 10.0
    screenshots: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    lang: str | None = None


@dataclass
class CrawlConfig:
    seeds: list[SeedSpec]
    scope_type: str | None = None
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    depth: int = -1
    extra_hops: int = 0
    limit: int = 0
    size_limit: int = 0
    time_limit: float = 0
    workers: int = 1
    # Processes of this one instance sharing the workers (procs.py); HTTP mode only.
    processes: int = 1
    collection: str = "crawl"
    cwd: Path = Path(".")
    redis_url: str = "redis://localhost:6379/0"
    crawl_id: str = "crawl"
    instance_id: str = "localhost"
    generate_wacz: bool = False
    write_pages_to_redis: bool = False
    log_errors_to_redis: bool = False
    user_agent: str = DEFAULT_USER_AGENT
    page_load_timeout: float = 90.0
    disk_utilization: int = 90
    use_robots: bool = False
    host_delay: float = 0.0
    # Ours: requests per second to one host, for every crawl together (hosts.py).
    rates: Rates = field(default_factory=Rates)
    health_check_port: int | None = None
    restarts_on_error: bool = False
    # Networks the crawl address policy opens (netpolicy.AddressPolicy); none by default.
    allow_networks: tuple[IPNetwork, ...] = ()
    # Where each session's WACZ is uploaded (STORE_* environment variables); None: kept only.
    store: Store | None = None
    browser: BrowserConfig | None = None  # --browser: pages loaded in Chromium

    # Ours: revisit records for payloads the org kept already (dedup.py; Redis <id>:dedup).
    dedup: bool = False
    # --sitemap: a sitemap's URL, or "auto" (robots.txt's, else /sitemap.xml); None: none read.
    sitemap: str | None = None
    sitemap_from: datetime | None = None  # --sitemapFromDate: only URLs with a lastmod since
    seed_file_url: str | None = None  # --seedFile URL: more seeds, read at start (seedfile.py)

    @property
    def collection_dir(self) -> Path:
        return self.cwd / "collections" / self.collection


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so a bad option becomes exit code 4."""

    def error(self, message: str):
        raise ConfigError(message)


# option name -> (config key, type). Booleans are flags on the command line.
_LIST_OPTIONS = {"seeds": "seeds", "include": "include", "exclude": "exclude"}
_FLAGS = (
    "generateWACZ", "writePagesToRedis", "logErrorsToRedis", "headless",
    "restartsOnError", "useRobots", "dedup",
)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="archiver-crawler", add_help=True, allow_abbrev=False,
                description="A crawler (HTTP, or Chromium with --browser) speaking browsertrix-crawler's protocol.")
    S = argparse.SUPPRESS
    p.add_argument("--seeds", "--url", dest="seeds", action="append", default=S)
    p.add_argument("--seedFile", "--urlFile", dest="seedFile", default=S)
    p.add_argument("--sitemap", "--useSitemap", dest="sitemap", nargs="?", const="auto", default=S,
                   help="queue the URLs of this sitemap, or (no value) of those robots.txt names, "
                        "else /sitemap.xml")
    p.add_argument("--sitemapFromDate", "--sitemapFrom", dest="sitemapFromDate", default=S,
                   help="only sitemap URLs whose lastmod is at or after this W3C date")
    p.add_argument("--scopeType", default=S)
    p.add_argument("--include", action="append", default=S)
    p.add_argument("--exclude", action="append", default=S)
    p.add_argument("--depth", type=int, default=S)
    p.add_argument("--extraHops", type=int, default=S)
    p.add_argument("--limit", "--pageLimit", dest="limit", type=int, default=S)
    p.add_argument("--sizeLimit", type=int, default=S)
    p.add_argument("--timeLimit", type=float, default=S)
    p.add_argument("--workers", "-w", type=int, default=S)
    p.add_argument("--processes", type=int, default=S,
                   help="ours: processes of this instance sharing --workers (HTTP mode); "
                        "default: the CPUs this process may run on, at most --workers, "
                        "1 with --browser or --hostDelay")
    p.add_argument("--collection", "-c", default=S)
    p.add_argument("--cwd", default=S)
    p.add_argument("--redisStoreUrl", default=S)
    p.add_argument("--crawlId", "--id", dest="crawlId", default=S)
    p.add_argument("--config", default=S)
    p.add_argument("--userAgent", default=S)
    p.add_argument("--pageLoadTimeout", "--timeout", dest="pageLoadTimeout", type=float, default=S)
    p.add_argument("--diskUtilization", type=int, default=S)
    p.add_argument("--hostDelay", type=float, default=S,
                   help="minimum seconds between two requests of this instance to one host")
    p.add_argument("--hostRate", type=float, default=S,
                   help="ours: requests per second to one host, all crawls together (0: no limit)")
    p.add_argument("--hostRates", action="append", default=S,
                   help="ours: pattern=rate (comma-separated, repeatable), e.g. *.example.org=0.5")
    p.add_argument("--healthCheckPort", type=int, default=S)
    p.add_argument("--browser", action="store_true", default=S,
                   help="ours: load pages in Chromium (browser mode, docs/crawlers.md)")
    p.add_argument("--waitUntil", default=S)
    p.add_argument("--postLoadDelay", type=float, default=S)
    p.add_argument("--behaviors", default=S)
    p.add_argument("--behaviorTimeout", type=float, default=S)
    p.add_argument("--screenshot", default=S)
    # The real crawler's spelling. HTTP mode always writes the text into pages.jsonl (the
    # runner passes --text to-pages to every crawler); browser mode writes what it names.
    p.add_argument("--text", nargs="?", const="to-pages", default=S)
    p.add_argument("--lang", default=S)
    p.add_argument("--chromium", default=S, help="ours: the Chromium to run in browser mode")
    for unsupported in ("--blockAds", "--profile"):
        p.add_argument(unsupported, nargs="?", const=True, default=S)
    p.add_argument("--allowNetworks", action="append", default=S,
                   help="ours: CIDRs (repeatable or comma-separated) the crawl may fetch "
                        "although the address policy refuses them by default, e.g. 127.0.0.0/8")
    for flag in _FLAGS:
        p.add_argument(f"--{flag}", action="store_true", default=S)
    p.add_argument("--version", action="version", version=__version__)
    return p


def load_config_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    import yaml  # only config files need it: kept out of every start-up

    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid YAML/JSON: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of options")
    known = {a.dest for a in build_parser()._actions} | {"url", "pageLimit", "timeout", "id"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in config file {path}: {', '.join(unknown)}")
    aliases = {"url": "seeds", "pageLimit": "limit", "timeout": "pageLoadTimeout", "id": "crawlId"}
    return {aliases.get(k, k): v for k, v in data.items()}


def parse_args(argv: list[str], env: dict[str, str] | None = None) -> CrawlConfig:
    env = os.environ if env is None else env
    if argv and argv[0] == "crawl":  # the real image is run as `crawl --config ...`
        argv = argv[1:]
    cli = vars(build_parser().parse_args(argv))
    options: dict[str, Any] = {}
    if "config" in cli:
        options.update(load_config_file(cli["config"]))
    options.update(cli)
    return _build_config(options, env)


def _build_config(o: dict[str, Any], env: dict[str, str]) -> CrawlConfig:
    seeds = _seeds(o)
    scope_type, include, exclude = _scope(o, seeds)
    collection = str(o.get("collection") or "crawl-" + _timestamp())
    if not COLLECTION_RE.match(collection):
        raise ConfigError(f"--collection {collection!r} must match ^[\\w][\\w-]*$")
    workers = _int(o, "workers", 1)
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    disk = _int(o, "diskUtilization", 90)
    if not 0 <= disk <= 100:
        raise ConfigError("--diskUtilization is a percentage (0 disables the check)")
    redis_url = str(o.get("redisStoreUrl") or "redis://localhost:6379/0")
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("--redisStoreUrl must be a redis:// URL")

    from archiver_crawler.sitemap import sitemap_options  # it reads aiohttp's errors

    browser = _browser(o)
    host_delay = _nonneg(o, "hostDelay", 0.0, float)
    return CrawlConfig(
        seeds=seeds,
        scope_type=scope_type,
        include=include,
        exclude=exclude,
        depth=_int(o, "depth", -1),
        extra_hops=_nonneg(o, "extraHops", 0),
        limit=_nonneg(o, "limit", 0),
        size_limit=_nonneg(o, "sizeLimit", 0),
        time_limit=_nonneg(o, "timeLimit", 0, float),
        workers=workers,
        processes=_processes(o, workers, browser is not None, host_delay),
        collection=collection,
        cwd=Path(o.get("cwd") or os.getcwd()).resolve(),
        redis_url=redis_url,
        crawl_id=str(o.get("crawlId") or env.get("CRAWL_ID") or socket.gethostname()),
        instance_id=env.get("CRAWLER_HOSTNAME") or socket.gethostname(),
        generate_wacz=bool(o.get("generateWACZ", False)),
        write_pages_to_redis=bool(o.get("writePagesToRedis", False)),
        log_errors_to_redis=bool(o.get("logErrorsToRedis", False)),
        user_agent=str(o.get("userAgent") or DEFAULT_USER_AGENT),
        page_load_timeout=_nonneg(o, "pageLoadTimeout", 90.0, float) or 90.0,
        disk_utilization=disk,
        use_robots=bool(o.get("useRobots", False)),
        host_delay=host_delay,
        health_check_port=o.get("healthCheckPort"),
        restarts_on_error=bool(o.get("restartsOnError", False)),
        allow_networks=_networks(o.get("allowNetworks")),
        store=store_from_env(env),
        browser=browser,
        dedup=bool(o.get("dedup", False)),
        **host_options(o),
        **sitemap_options(o),
        seed_file_url=str(o["seedFile"]) if _online(o.get("seedFile")) else None,
    )


def available_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The CPUs this process may run on: its affinity (a container's cpuset, taskset), at
    most its cgroup's CPU quota rounded up (`docker run --cpus 2.7`: 3)."""
    try:
        cpus = len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no sched_getaffinity (macOS)
        cpus = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 CPU controller here: the affinity is all there is
    return cpus


def _processes(o: dict[str, Any], workers: int, browser: bool, host_delay: float) -> int:
    """--processes, capped by --workers. By default one per available CPU in HTTP mode;
    one in browser mode (Chromium, not our Python, is the CPU there, and runs in processes of
    its own) and with --hostDelay (spread over processes it only holds on average)."""
    if o.get("processes") is None:
        return 1 if browser or host_delay else min(available_cpus(), workers)
    processes = _int(o, "processes", 1)
    if processes < 1:
        raise ConfigError("--processes must be at least 1")
    if browser and processes > 1:
        raise ConfigError("--processes above 1 applies to HTTP mode only, not with --browser")
    return min(processes, workers)


def _names(o: dict[str, Any], key: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated option (or a config file list) of names out of `choices`."""
    value = o.get(key)
    items = value if isinstance(value, list) else str(value).split(",")
    names = tuple(dict.fromkeys(str(i).strip() for i in items if str(i).strip()))
    if not names:
        raise ConfigError(f"--{key}: give at least one of {', '.join(choices)}")
    for name in names:
        if name not in choices:
            raise ConfigError(f"--{key}: {name!r} is not one of {', '.join(choices)}")
    return names


def _browser(o: dict[str, Any]) -> BrowserConfig | None:
    for unsupported in ("blockAds", "profile"):
        if unsupported in o:
            raise ConfigError(f"--{unsupported} is not supported by archiver's crawler "
                              "(use the browsertrix-crawler image)")
    if not o.get("browser"):
        if "text" in o:
            _names(o, "text", TEXT_MODES)  # judged in both modes; HTTP mode writes to-pages always
        given = [f"--{k}" for k in BROWSER_ONLY if k in o]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply to browser mode: add --browser")
        return None
    from archiver_crawler.browser.process import find_chromium  # browser mode only

    chromium = find_chromium(o.get("chromium"))
    if chromium is None:
        raise ConfigError(f"--browser: no Chromium found (tried {o.get('chromium')})"
                          if o.get("chromium") else
                          "--browser: no Chromium found (/usr/bin/chromium, chromium, "
                          "chromium-browser); install Debian's chromium or give --chromium PATH")
    lang = o.get("lang")
    if lang is not None and not LANG_RE.match(str(lang)):
        raise ConfigError(f"--lang {lang!r} is not a language code such as en or de")
    behaviors = _names(o, "behaviors", BEHAVIORS) if "behaviors" in o else ()
    return BrowserConfig(
        chromium=chromium,
        wait_until=_names(o, "waitUntil", WAIT_UNTIL) if "waitUntil" in o
        else ("load", "networkidle2"),
        post_load_delay=_nonneg(o, "postLoadDelay", 0.0, float),
        behaviors=behaviors,
        behavior_timeout=_nonneg(o, "behaviorTimeout", 10.0, float),
        screenshots=_names(o, "screenshot", SCREENSHOTS) if "screenshot" in o else (),
        text=_names(o, "text", TEXT_MODES) if "text" in o else (),
        lang=str(lang) if lang is not None else None,
    )


def _seeds(o: dict[str, Any]) -> list[SeedSpec]:
    seeds = [_seed_spec(s) for s in _as_list(o.get("seeds"), "seeds")]
    if o.get("seedFile") and not _online(o["seedFile"]):
        seeds += [SeedSpec(url=line) for line in _read_seed_file(o["seedFile"])
                  if line and not line.startswith("#")]
    if not seeds and not _online(o.get("seedFile")):
        raise ConfigError("no seeds: give --seeds/--url, --seedFile or `seeds` in the config file")
    for seed in seeds:
        _check_url(seed.url)
    return seeds


def _scope(o: dict[str, Any], seeds: list[SeedSpec]) -> tuple[str | None, list[str], list[str]]:
    """The crawl-wide scope type, includes and excludes, each seed's own checked too."""
    include = [str(r) for r in _as_list(o.get("include"), "include")]
    exclude = [str(r) for r in _as_list(o.get("exclude"), "exclude")]
    scope_type = o.get("scopeType")
    if scope_type is not None and scope_type not in SCOPE_TYPES:
        raise ConfigError(f"--scopeType must be one of {', '.join(SCOPE_TYPES)}, not {scope_type!r}")
    for seed in seeds:
        if seed.scope_type is not None and seed.scope_type not in SCOPE_TYPES:
            raise ConfigError(f"seed {seed.url}: invalid scopeType {seed.scope_type!r}")
        for rx in (*seed.include, *seed.exclude):
            _check_regex(rx)
    for rx in include + exclude:
        _check_regex(rx)
    return scope_type, include, exclude


def _seed_spec(value: Any) -> SeedSpec:
    if isinstance(value, str):
        return SeedSpec(url=value)
    if isinstance(value, dict) and isinstance(value.get("url"), str):
        return SeedSpec(
            url=value["url"],
            scope_type=value.get("scopeType"),
            include=tuple(_as_list(value.get("include"), "include")),
            exclude=tuple(_as_list(value.get("exclude"), "exclude")),
            depth=value.get("depth"),
            extra_hops=value.get("extraHops"),
        )
    raise ConfigError(f"a seed must be a URL or a mapping with `url`, not {value!r}")


def _as_list(value: Any, name: str) -> list:
    if value is None:
        return []
    if isinstance(value, (str, dict)):
        return [value]
    if isinstance(value, list):
        return value
    raise ConfigError(f"`{name}` must be a string or a list")


def _online(seed_file: Any) -> bool:
    """Whether --seedFile names a URL (read at start, seedfile.py) rather than a path."""
    return isinstance(seed_file, str) and seed_file.startswith(("http://", "https://"))


def _read_seed_file(path: str) -> list[str]:
    """The lines of a seed file, read up to MAX_SEED_FILE bytes (more is refused)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_SEED_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read seed file {path}: {exc.strerror}") from exc
    if len(data) > MAX_SEED_FILE:
        raise ConfigError(f"seed file {path} is larger than {MAX_SEED_FILE // 2**20} MiB")
    return [line.strip() for line in data.decode("utf-8", errors="replace").splitlines()]


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"seed {url!r} is not an http(s) URL")


def _networks(value: Any) -> tuple[IPNetwork, ...]:
    """`allowNetworks`: a list (config file, repeated option) of CIDRs or comma-separated
    CIDRs; a malformed entry is a ConfigError, never a silently narrower or wider policy."""
    if value is None:
        return ()
    entries: list[str] = []
    for item in _as_list(value, "allowNetworks"):
        if not isinstance(item, str):
            raise ConfigError(f"--allowNetworks: {item!r} is not a CIDR string like 10.0.0.0/8")
        entries += split_networks(item)
    try:
        return parse_networks(entries)
    except ValueError as exc:
        raise ConfigError(f"--allowNetworks: {exc}") from None


def _check_regex(rx: str) -> None:
    try:
        re.compile(rx)
    except re.error as exc:
        raise ConfigError(f"invalid regex {rx!r}: {exc}") from exc


def _int(o: dict, key: str, default: int) -> int:
    value = o.get(key, default)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--{key} must be an integer, not {value!r}") from exc


def _nonneg(o: dict, key: str, default, kind=int):
    value = o.get(key, default)
    try:
        number = kind(default if value is None else value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--{key} must be a number, not {value!r}") from exc
    if number < 0:
        raise ConfigError(f"--{key} must not be negative")
    return number


def _timestamp() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y%m%d%H%M%S")
