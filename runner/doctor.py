"""`archiver doctor`: can this set-up crawl? One finding per part, and a fix for each failure.

Every check only reads (it creates no database, starts no Redis, pulls nothing) and is
bounded in time: the engine by ARCHIVER_DOCKER_TIMEOUT, Redis by PING_TIMEOUT. A check that
depends on a failed one is skipped rather than failed, so one cause gives one failed line.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import redis

from archiver.conf import Settings
from archiver.errors import ConfigError, EngineUnavailable, LaunchError
from crawls.admission import read_host_usage
from crawls.config import human_size
from runner.launchers import DockerLauncher, LocalLauncher
from runner.launchers.docker import OWN_IMAGE, image_fix
from runner.redis_server import EmbeddedRedis, RedisEndpoint, parse_url

PING_TIMEOUT = 2.0
VERSION_TIMEOUT = 10.0  # seconds the local crawler (or Chromium) gets to print its version
CHROMIUM_LABEL = "org.archiver.chromium"  # scripts/build-crawler-image.sh: where the image's Chromium is
BROWSER_DEFAULT = "new crawls default to browser mode (add --no-browser for HTTP only)"
HTTP_DEFAULT = "new crawls default to HTTP mode"
BROWSERTRIX_SOURCE = "github.com/webrecorder/browsertrix-crawler"


@dataclass(frozen=True)
class Finding:
    """What one check found: `status` is ok, fail or skip; `fix` says what to do on a fail."""

    name: str
    status: str
    text: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def ok(name: str, text: str) -> Finding:
    return Finding(name, "ok", text)


def fail(name: str, text: str, fix: str) -> Finding:
    return Finding(name, "fail", text, fix)


def skip(name: str, text: str) -> Finding:
    return Finding(name, "skip", text)


def run_checks(settings: Settings) -> list[Finding]:
    """Every check, in the order a reader fixes them."""
    findings = [check_database(), check_redis(settings)]
    if uses_docker(settings):
        launcher = DockerLauncher(settings)
        try:
            engine = check_engine(launcher)
            findings += [engine, check_image(launcher) if not engine.failed
                         else skip("crawler image", f"{launcher.image}: not checked without an engine")]
            findings.append(check_image_browser(settings, launcher) if not engine.failed
                            else skip("browser", "the image's Chromium: not checked without an engine"))
        finally:
            launcher.close()
    else:
        findings += [ok("docker engine", f"not used: {why_local(settings)}"), check_local_crawler(settings),
                     check_local_browser(settings)]
    return [*findings, check_disk(settings), check_data_dir(settings), check_signing(settings)]


def check_signing(settings: Settings) -> Finding:
    """How archives are signed, and the public key to hand out (wacz-auth, docs/security.md)."""
    from crawls import wacz_auth

    if settings.signing_url:
        host = urlsplit(settings.signing_url).hostname
        return ok("signing", f"archives signed with a domain by the authsign server at {host}")
    if not (settings.data_dir / wacz_auth.KEY_FILE).exists():  # doctor changes nothing
        return ok("signing", "no key yet: archiver makes one in the data dir when it first signs "
                  "(`archiver signingkey` makes and shows it)")
    try:
        public = wacz_auth.public_key(settings.data_dir)
    except (OSError, ValueError) as exc:
        return fail("signing", f"archiver's signing key cannot be read or made: {exc}",
                    f"check {settings.data_dir / wacz_auth.KEY_FILE} (a PEM ECDSA P-384 key, 0600)")
    used = len(wacz_auth.known_keys(settings.data_dir))
    return ok("signing", f"archives signed with archiver's key {wacz_auth.fingerprint(public)} "
              f"(public key {public}; {used} key(s) used so far)")


# --- the database ----------------------------------------------------------------------------


def check_database() -> Finding:
    from django.db import DatabaseError, connection
    from django.db.migrations.executor import MigrationExecutor

    from crawls.cli import sqlite_file

    database = sqlite_file()
    if database is not None and not database.exists():  # connecting would create it
        return fail("database", f"no database at {database}",
                    "run `archiver migrate`, or set ARCHIVER_DATA_DIR to your data dir")
    where = database or database_address(connection.settings_dict)
    try:
        connection.ensure_connection()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return fail("database", f"{connection.vendor} {where} does not answer: {first}",
                    "check ARCHIVER_DATABASE_URL and that the database server runs")
    if pending:
        migration = pending[0][0]
        return fail("database", f"{connection.vendor} {where}: {len(pending)} migration(s) not applied "
                    f"(first: {migration.app_label}.{migration.name})", "run `archiver migrate`")
    return ok("database", f"{connection.vendor} {where}: reachable, migrations applied")


def database_address(settings_dict: dict) -> str:
    """host:port/name of a database server; never its password."""
    host = settings_dict.get("HOST") or "localhost"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"{host}{port}/{settings_dict.get('NAME', '')}"


# --- Redis -----------------------------------------------------------------------------------


def check_redis(settings: Settings) -> Finding:
    if settings.redis_url:
        try:
            endpoint = parse_url(settings.redis_url)
        except ConfigError as exc:
            return fail("redis", str(exc), "set ARCHIVER_REDIS_URL to a redis:// or rediss:// address")
        where = f"Redis at {endpoint.host}:{endpoint.port} (ARCHIVER_REDIS_URL)"
        problem = ping_problem(endpoint)
        if problem:
            return fail("redis", f"{where} {problem}",
                        "start that Redis server, or correct ARCHIVER_REDIS_URL")
        return ok("redis", f"{where} answers")
    binary = shutil.which("redis-server")
    if binary is None:
        return fail("redis", "ARCHIVER_REDIS_URL is unset and redis-server is not on PATH",
                    "apt-get install redis-server, or set ARCHIVER_REDIS_URL")
    endpoint = EmbeddedRedis(settings).recorded()
    if endpoint is not None and ping_problem(endpoint) is None:
        return ok("redis", f"the embedded Redis answers on {endpoint.host}:{endpoint.port}")
    return ok("redis", f"the embedded Redis is not running: `archiver run` starts it ({binary})")


def ping_problem(endpoint: RedisEndpoint) -> str | None:
    """Why the server at `endpoint` does not do for us, or None when it answers our PING."""
    client = endpoint.client(timeout=PING_TIMEOUT)
    try:
        client.ping()
    except redis.AuthenticationError:
        return "refuses the user name or password"
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return f"does not answer within {PING_TIMEOUT:g} s ({type(exc).__name__})"
    except redis.ResponseError as exc:
        return f"answers with an error: {str(exc)[:100]}"
    finally:
        client.close()
    return None


# --- the crawler: Docker or local ------------------------------------------------------------


def uses_docker(settings: Settings) -> bool:
    """As make_launcher decides: docker or swarm, or auto with an engine configured."""
    if settings.launcher != "auto":
        return settings.launcher in ("docker", "swarm")  # swarm: the manager is the engine
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()


def why_local(settings: Settings) -> str:
    if settings.launcher == "local":
        return "ARCHIVER_LAUNCHER=local runs crawlers as local processes"
    return "no engine configured (DOCKER_HOST unset, no /var/run/docker.sock): crawlers run as local processes"


def check_engine(launcher: DockerLauncher) -> Finding:
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        version = launcher.engine_version()
    except LaunchError as exc:
        return fail("docker engine", f"{where} {engine_problem(exc, launcher.timeout)}",
                    "start the engine (or scripts/docker-engine.sh start), point DOCKER_HOST at it, "
                    "or set ARCHIVER_LAUNCHER=local")
    return ok("docker engine", f"{where} answers (engine {version})")


def engine_problem(exc: LaunchError, timeout: float) -> str:
    cause = exc.__cause__
    if isinstance(cause, FileNotFoundError):
        return "does not exist (no socket there)"
    if isinstance(cause, ConnectionRefusedError):
        return "refuses connections (no engine listens there)"
    if isinstance(exc, EngineUnavailable):
        return f"does not answer within {timeout:g} s ({type(cause).__name__})"
    return f"answers with an error: {exc}"


def check_image(launcher: DockerLauncher) -> Finding:
    image = launcher.image
    try:
        labels = launcher.image_labels()
        if labels is None:
            return fail("crawler image", f"{image} is not on the Docker engine", image_fix(image))
        kind, version = crawler_kind(image, labels), labels.get("org.opencontainers.image.version")
        source = "the image's labels"
        if not version:
            version, source = launcher.crawler_version() or "unknown", "`crawl --version`"
    except LaunchError as exc:
        return fail("crawler image", f"{image}: {exc}", "see the Docker engine's log")
    return ok("crawler image", f"{image}: {kind}, version {version} (from {source})")


def crawler_kind(image: str, labels: dict[str, str]) -> str:
    if labels.get("org.opencontainers.image.title") == "archiver-crawler" or image.startswith(OWN_IMAGE):
        return "archiver's own crawler (HTTP, or Chromium in browser mode)"
    if BROWSERTRIX_SOURCE in labels.get("org.opencontainers.image.source", "") or "browsertrix-crawler" in image:
        return "webrecorder's browsertrix-crawler (a browser)"
    return "a crawler archiver does not know (it must speak browsertrix-crawler's protocol)"


def check_local_crawler(settings: Settings) -> Finding:
    try:
        command = LocalLauncher(settings).command
    except ConfigError as exc:
        return fail("crawler", str(exc), "install archiver-crawler, or set ARCHIVER_LOCAL_CRAWLER_COMMAND")
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True,
                                timeout=VERSION_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return fail("crawler", f"{command[0]} --version failed ({type(exc).__name__})",
                    "check ARCHIVER_LOCAL_CRAWLER_COMMAND")
    lines = result.stdout.strip().splitlines()
    version = lines[0][:100] if result.returncode == 0 and lines else "unknown"
    return ok("crawler", f"local command `{shlex.join(command)[:200]}`, version {version}")


# --- the browser of archiver's own crawler --------------------------------------------------


def check_local_browser(settings: Settings) -> Finding:
    """Which Chromium archiver's own crawler drives here, and so which mode `add` picks."""
    if settings.browser_crawler("local"):
        return ok("browser", f"{settings.crawler_name('local')} drives its own browser: every crawl is a browser crawl")
    path = settings.chromium_path("local")
    if path is None:
        if settings.chromium == "none":
            return ok("browser", f"ARCHIVER_CHROMIUM=none: {HTTP_DEFAULT} (--browser is refused)")
        if settings.chromium:
            return fail("browser", f"ARCHIVER_CHROMIUM={settings.chromium} is not an executable file",
                        "point ARCHIVER_CHROMIUM at a Chromium, unset it, or set it to none")
        return ok("browser", f"no Chromium found (/usr/bin/chromium, chromium, chromium-browser): {HTTP_DEFAULT}; "
                             "install the chromium package for browser mode")
    version = chromium_version(path)
    if version is None:
        return fail("browser", f"{path} --version failed: it may not be a Chromium",
                    "install the chromium package, or point ARCHIVER_CHROMIUM at a working one")
    return ok("browser", f"{path}: {version}; {BROWSER_DEFAULT}")


def chromium_version(path: str) -> str | None:
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True,
                                timeout=VERSION_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0][:100] if result.returncode == 0 and lines else None


def check_image_browser(settings: Settings, launcher: DockerLauncher) -> Finding:
    """The image's Chromium, as its label says (the engine is not asked to run it)."""
    image = launcher.image
    if settings.browser_crawler():
        return ok("browser", f"{image} drives its own browser: every crawl is a browser crawl")
    if settings.chromium_path() is None:
        return ok("browser", f"ARCHIVER_CHROMIUM=none: {HTTP_DEFAULT} (--browser is refused)")
    try:
        labels = launcher.image_labels()
    except LaunchError as exc:
        return fail("browser", f"{image}: {exc}", "see the Docker engine's log")
    if labels is None:
        return skip("browser", f"{image} is not on the Docker engine: its Chromium is not checked")
    found = labels.get(CHROMIUM_LABEL)
    if not found:
        return fail("browser", f"{image} carries no Chromium (no {CHROMIUM_LABEL} label), yet {BROWSER_DEFAULT}",
                    "rebuild it with scripts/build-crawler-image.sh, or set ARCHIVER_CHROMIUM=none")
    return ok("browser", f"{image}: {found} ({labels.get(CHROMIUM_LABEL + '.version', 'version unknown')}); "
                         f"{BROWSER_DEFAULT}")


# --- the disk and the data dir ---------------------------------------------------------------


def check_disk(settings: Settings) -> Finding:
    usage = read_host_usage(settings.data_dir)
    used, limit = usage.disk_used_percent, settings.disk_threshold_percent
    total = usage.disk_used + usage.disk_free
    space = f"{human_size(usage.disk_free)} free of {human_size(total)} under {settings.data_dir}"
    if used >= limit:
        return fail("disk", f"{used:.0f} % used, at or over the {limit:g} % where crawls pause ({space})",
                    f"free space on that filesystem, or raise ARCHIVER_DISK_THRESHOLD (now {limit:g})")
    return ok("disk", f"{100 - used:.0f} % free ({space}); crawls pause at {limit:g} % used")


def check_data_dir(settings: Settings) -> Finding:
    from crawls.checks import private_paths, too_open
    from crawls.cli import sqlite_file

    path = settings.data_dir
    try:
        info = path.stat()
    except FileNotFoundError:
        return fail("data dir", f"{path} does not exist", "run `archiver migrate`: it creates the data dir (0700)")
    problems, fixes = [], []
    if info.st_uid != os.geteuid():
        problems.append(f"owned by {user_name(info.st_uid)}, archiver runs as {user_name(os.geteuid())}")
        fixes.append(f"chown -R {user_name(os.geteuid())} {path} (or run archiver as its owner)")
    if stat.S_IMODE(info.st_mode) & 0o077:
        problems.append(f"mode {stat.S_IMODE(info.st_mode):04o}, not 0700")
        fixes.append(f"chmod 700 {path}")
    widened = [p for p in private_paths(path, sqlite_file()) if p != path and too_open(p) is not None]
    if widened:
        problems.append(f"{len(widened)} path(s) inside readable by other users (first: {widened[0]})")
        fixes.append("chmod them 700 (folders) or 600 (files); `archiver check` lists each")
    if problems:
        return fail("data dir", f"{path}: {'; '.join(problems)}", "; ".join(fixes))
    return ok("data dir", f"{path}: owned by {user_name(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}")


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
