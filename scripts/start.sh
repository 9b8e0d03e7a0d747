#!/usr/bin/env bash
# archiver's main job on a fresh machine: install, migrate, serve the admin on 127.0.0.1
# through gunicorn (static files by WhiteNoise), and run the daemon in the foreground.
# Ctrl-C stops the daemon (crawler containers keep running and are adopted next start)
# and the admin server this script started.
set -euo pipefail
# Everything archiver writes in its data dir is private: 0700 folders, 0600 files.
umask 077
cd "$(dirname "$0")/.."
ROOT=$PWD
export ARCHIVER_DATA_DIR="${ARCHIVER_DATA_DIR:-$ROOT/data}"
# The ARCHIVER_* variables given to this script are kept there (archiver/keep_settings.py
# writes it below) for every archiver process, in this shell or another; this script reads
# its own the same way: the environment's (even empty) over the file's.
SETTINGS_FILE="$ARCHIVER_DATA_DIR/archiver.env"
setting() {
    if [ -n "${!1+set}" ]; then printf '%s' "${!1}"; else sed -n "s/^$1=//p" "$SETTINGS_FILE" 2>/dev/null | tail -n 1; fi
}
PORT=$(setting ARCHIVER_PORT)
PORT="${PORT:-8000}"
PY="$ROOT/.venv/bin/python"
ARCHIVER="$ROOT/.venv/bin/archiver"
# shellcheck source=lib/python.sh
source "$ROOT/scripts/lib/python.sh"

say() { printf '[start] %s\n' "$*" >&2; }
# True when something accepts connections on 127.0.0.1:$1 (bash's /dev/tcp, no tool needed).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_taken() {
    say "port $PORT of 127.0.0.1 is taken by another program: stop it, or pick another port with ARCHIVER_PORT (e.g. ARCHIVER_PORT=8080 bash scripts/start.sh)"
    exit 1
}
as_root_with_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

[[ $PORT =~ ^[0-9]{1,5}$ ]] && ((10#$PORT >= 1 && 10#$PORT <= 65535)) || {
    say "ARCHIVER_PORT=$PORT is not a port number (1 to 65535)"; exit 1; }

# One instance per data dir, checked before anything is migrated, collected or started: a
# second start.sh once ran migrate, collectstatic --clear and ensureadmin against the live
# one. start.lock is ours (held by this script, and inherited by what it starts); runner.lock
# is the daemon's (runner/daemon.py acquire_runner_lock), for one started without us. Each
# holds its owner's pid. A start.sh killed outright (kill -9) leaves start.lock held by what
# it started: those are named then, not its pid, which nobody can stop any more.
RUN_DIR="$ARCHIVER_DATA_DIR/run"
in_use() {
    say "$ARCHIVER_DATA_DIR is in use by $1: stop it first, or give this one another ARCHIVER_DATA_DIR"
    exit 1
}
pid_in() { head -c 20 "$1" 2>/dev/null | tr -cd 0-9; }
running() { local pid; pid=$(pid_in "$1"); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && printf '%s' "$pid"; }
held() { [ -f "$1" ] && ! flock -n "$1" true 2>/dev/null; }
if held "$RUN_DIR/start.lock"; then
    pid=$(running "$RUN_DIR/start.lock") && in_use "scripts/start.sh (pid $pid)"
    left=$(for file in runner.lock gunicorn.pid replay.pid; do running "$RUN_DIR/$file" && echo || true; done | xargs)
    in_use "what a scripts/start.sh that has ended left running (pid ${left:-unknown}: its daemon and servers)"
fi
held "$RUN_DIR/runner.lock" && in_use "an archiver daemon (pid $(pid_in "$RUN_DIR/runner.lock"))"
mkdir -p "$RUN_DIR"
exec 9>>"$RUN_DIR/start.lock"
flock -n 9 || in_use "scripts/start.sh (pid $(pid_in "$RUN_DIR/start.lock"))"  # two started at the same moment
echo "$$" > "$RUN_DIR/start.lock"

listening "$PORT" && port_taken  # before anything is installed or started

if ! command -v redis-server >/dev/null 2>&1; then
    if as_root_with_apt; then
        say "installing redis-server (the embedded Redis archiver starts for live progress)"
        apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq redis-server >/dev/null
    else
        say "redis-server is not on PATH: install it (e.g. apt-get install redis-server) or set ARCHIVER_REDIS_URL"
        [ -n "$(setting ARCHIVER_REDIS_URL)" ] || exit 1
    fi
fi

stamp="$ROOT/.venv/.installed"
if [ ! -x "$PY" ]; then
    python=$(find_python) || exit 1
    if venv_package=$(venv_package_missing "$python"); then
        as_root_with_apt || { say "$python cannot create a virtualenv: apt-get install $venv_package"; exit 1; }
        say "installing $venv_package (to create the virtualenv)"
        apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$venv_package" >/dev/null
    fi
    say "creating the virtualenv in .venv with $python ($(python_version_of "$python"))"
    "$python" -m venv "$ROOT/.venv"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ crawler/pyproject.toml -nt "$stamp" ]; then
    say "installing archiver and its crawler"
    "$PY" -m pip install -q --upgrade pip
    # Older checkouts installed the crawler as a distribution of its own; archiver's carries it.
    "$PY" -m pip uninstall -q -y archiver-crawler 2>/dev/null || true
    "$PY" -m pip install -q -e .
    touch "$stamp"
fi

kept=$("$PY" -m archiver.keep_settings)  # a bad value stops here, before anything is written
"$ARCHIVER" migrate --noinput -v0
bash "$ROOT/scripts/replay-files.sh"  # ReplayWeb.page for the replay origin (npm, checked)
# --clear: the admin's static files once held ReplayWeb.page, which only the replay origin serves.
"$ARCHIVER" collectstatic --noinput --clear -v0
"$ARCHIVER" ensureadmin

"$ROOT/.venv/bin/gunicorn" archiver.wsgi:application \
    --bind "127.0.0.1:$PORT" --workers 2 --threads 4 --umask 0077 \
    --worker-class archiver.gunicorn_worker.JsonErrorWorker \
    --limit-request-line 8190 --limit-request-field_size 16380 \
    --logger-class archiver.replay_logging.AccessLogger \
    --pid "$ARCHIVER_DATA_DIR/run/gunicorn.pid" \
    --access-logfile "$ARCHIVER_DATA_DIR/run/admin-access.log" \
    --error-logfile "$ARCHIVER_DATA_DIR/run/admin-error.log" &
GUNICORN=$!
trap 'kill "$GUNICORN" 2>/dev/null; wait "$GUNICORN" 2>/dev/null || true' EXIT
# gunicorn listens before it loads archiver; if it cannot (the port was taken since the
# check above, or a socket holds it without listening), it gives up and exits.
deadline=$((SECONDS + 60))
until listening "$PORT"; do
    if ! kill -0 "$GUNICORN" 2>/dev/null || ((SECONDS > deadline)); then
        grep -q "Connection in use" "$ARCHIVER_DATA_DIR/run/admin-error.log" 2>/dev/null && port_taken
        say "the admin (gunicorn) did not start: $(tail -n 1 "$ARCHIVER_DATA_DIR/run/admin-error.log" 2>/dev/null) (all of it in $ARCHIVER_DATA_DIR/run/admin-error.log)"
        exit 1
    fi
    sleep 0.1
done
# Archived pages are replayed on an origin of their own (ARCHIVER_REPLAY_URL, by default
# http://127.0.0.2:8090): an app with no admin, no session and no cookies (docs/security.md).
read -r REPLAY_URL REPLAY_BIND ALLOWED_NETWORKS < <("$PY" -c 'from archiver import conf
s = conf.get()
print(s.replay_url, s.replay_listen, ",".join(s.crawl_allow_networks))')
replay_host=${REPLAY_BIND%:*} replay_host=${replay_host#[} replay_host=${replay_host%]}
replay_up() { (exec 3<>"/dev/tcp/$replay_host/${REPLAY_BIND##*:}") 2>/dev/null; }
replay_failed() {
    say "the replay server (gunicorn) cannot serve $REPLAY_BIND: $1 (another address: ARCHIVER_REPLAY_URL, docs/configuration.md)"
    exit 1
}
replay_up && replay_failed "another program has it"
"$ROOT/.venv/bin/gunicorn" archiver.replay_wsgi:application \
    --bind "$REPLAY_BIND" --workers 2 --threads 4 --umask 0077 \
    --logger-class archiver.replay_logging.AccessLogger \
    --pid "$ARCHIVER_DATA_DIR/run/replay.pid" \
    --access-logfile "$ARCHIVER_DATA_DIR/run/replay-access.log" \
    --error-logfile "$ARCHIVER_DATA_DIR/run/replay-error.log" &
REPLAY=$!
trap 'kill "$GUNICORN" "$REPLAY" 2>/dev/null; wait "$GUNICORN" "$REPLAY" 2>/dev/null || true' EXIT
deadline=$((SECONDS + 60))
until replay_up; do
    if ! kill -0 "$REPLAY" 2>/dev/null || ((SECONDS > deadline)); then
        replay_failed "$(tail -n 1 "$ARCHIVER_DATA_DIR/run/replay-error.log" 2>/dev/null)"
    fi
    sleep 0.1
done
say "admin: http://127.0.0.1:$PORT/admin/ (gunicorn pid $GUNICORN)"
say "replay: $REPLAY_URL, the admin's Replay pages frame it (gunicorn pid $REPLAY)"
say "$kept"
say "from another shell, put the archiver command on PATH: source $ROOT/.venv/bin/activate"
say "(or call it as $ARCHIVER), then add a crawl: archiver add https://example.org/"
if [ -z "$ALLOWED_NETWORKS" ]; then
    say "a site on this host (e.g. http://127.0.0.1:8001/) is refused unless its network is opened: start with ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.1/32 bash scripts/start.sh (README: A first crawl)"
fi

# The daemon runs as a child we wait for, not in the foreground: a TERM or HUP sent to this
# script alone (a service manager, `kill PID`) would otherwise leave it running, holding its
# leases and the embedded Redis. The signal is passed on, and we wait for the daemon to end
# its tick and hand its crawls back; Ctrl-C reaches the whole process group.
"$ARCHIVER" run --daemon &
DAEMON=$!
trap 'kill -TERM "$DAEMON" 2>/dev/null' TERM HUP INT
status=0
wait "$DAEMON" || status=$?
while kill -0 "$DAEMON" 2>/dev/null; do  # a trapped signal ends `wait` early
    status=0
    wait "$DAEMON" || status=$?
done
exit "$status"
