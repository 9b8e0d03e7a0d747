#!/usr/bin/env bash
# A private Docker engine for archiver's tests and CI: start | stop | env | status
#
# The engine runs without the default bridge network (its 172.17.0.0/16 range must not
# be used here); containers use host networking. Images live under a fixed data-root so
# that repeated runs on one machine reuse them; nothing may rely on that.
#
#   bash scripts/docker-engine.sh start         # install docker.io if needed, start dockerd
#   eval "$(bash scripts/docker-engine.sh env)" # export DOCKER_HOST for this shell
#   bash scripts/docker-engine.sh status        # exit 0 when the engine answers
#   bash scripts/docker-engine.sh stop          # stop the dockerd this script started
#   bash scripts/docker-engine.sh options       # dockerd's options, one a line, for a caller
#                                               # that runs (and signals) dockerd itself
#
# Scripts that share one engine (several test runs at once on one machine) use leases:
#   bash scripts/docker-engine.sh acquire PID   # start (if needed) and hold a lease for PID
#   bash scripts/docker-engine.sh release PID   # drop it; the last holder stops the engine,
#                                               # but only if an acquire had started it
#
# Environment: ARCHIVER_DOCKER_ROOT (data, logs, pidfile; default /var/lib/archiver-docker),
# ARCHIVER_DOCKER_RUN (exec-root and socket; kept short because unix socket paths are
# limited to 108 bytes; default /run/archiver-docker), ARCHIVER_DOCKER_START_TIMEOUT (s),
# ARCHIVER_DOCKER_SWARM_ADDR (e.g. 127.0.0.1:2477: start/acquire make the engine a single-node
# Swarm manager listening and advertising on that address only; the swarm lives in the
# data-root, so a restarted engine is a manager again. Unset: swarm mode is left alone),
# ARCHIVER_DOCKER_DATA (data-root; default $ARCHIVER_DOCKER_ROOT/data), ARCHIVER_DOCKER_LIVE_RESTORE=1
# (containers keep running while dockerd is stopped; tests/chaos/test_engine_restart.py).
set -euo pipefail
# dockerd and debootstrap live in sbin, which a non-login root shell may lack.
export PATH=$PATH:/usr/sbin:/sbin

ROOT=${ARCHIVER_DOCKER_ROOT:-/var/lib/archiver-docker}
DATA=${ARCHIVER_DOCKER_DATA:-$ROOT/data}
RUN_DIR=${ARCHIVER_DOCKER_RUN:-/run/archiver-docker}
EXEC_ROOT=$RUN_DIR/exec
SOCK=$RUN_DIR/docker.sock
PIDFILE=$ROOT/docker.pid
LOG=$ROOT/dockerd.log
LEASES=$ROOT/leases
# Present while the running engine was started by an acquire (so the leases own it).
LEASED_MARK=$ROOT/started-by-lease
START_TIMEOUT=${ARCHIVER_DOCKER_START_TIMEOUT:-60}
SWARM_ADDR=${ARCHIVER_DOCKER_SWARM_ADDR:-}

say() { printf 'docker-engine: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# The docker.io package's own client matches its engine; a newer client elsewhere on
# PATH may lack pieces (e.g. buildx) that the old engine does not provide either.
docker_cli() {
    if [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; else command -v docker; fi
}

answers() {
    local cli
    cli=$(docker_cli) || return 1
    [[ -S $SOCK ]] && timeout 10 "$cli" -H "unix://$SOCK" info >/dev/null 2>&1
}

ensure_installed() {
    command -v dockerd >/dev/null 2>&1 && return 0
    [[ $(id -u) -eq 0 ]] || die "dockerd is missing and only root can install docker.io"
    say "installing docker.io with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq docker.io >&2
    command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd is not on PATH"
}

# Options that this dockerd knows; ip6tables appeared in 20.10 and is absent before.
dockerd_options() {
    local opts=(
        --data-root "$DATA" --exec-root "$EXEC_ROOT" --host "unix://$SOCK"
        --pidfile "$PIDFILE" --bridge=none --iptables=false --ip-masq=false
    )
    if dockerd --help 2>/dev/null | grep -q -- '--ip6tables'; then
        opts+=(--ip6tables=false)
    fi
    if [[ ${ARCHIVER_DOCKER_LIVE_RESTORE:-} == 1 ]]; then
        opts+=(--live-restore)
    fi
    printf '%s\n' "${opts[@]}"
}

running_pid() {
    [[ -f $PIDFILE ]] || return 1
    local pid
    pid=$(<"$PIDFILE")
    # A stale pidfile (after a reboot) may name an unrelated process: check its name. A
    # killed dockerd that its parent has not reaped yet is a zombie: dead, not running.
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] &&
        [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] && echo "$pid"
}

start() {
    if answers; then
        say "engine already answers on unix://$SOCK"
        ensure_swarm
        return 0
    fi
    ensure_installed
    [[ $(id -u) -eq 0 ]] || die "dockerd must be started as root"
    if pid=$(running_pid); then
        say "dockerd (pid $pid) is running but does not answer yet; waiting for it"
    else
        mkdir -p "$DATA" "$EXEC_ROOT"
        rm -f "$SOCK" "$PIDFILE"
        local opts
        mapfile -t opts < <(dockerd_options)
        say "starting dockerd (data-root $DATA, socket $SOCK, log $LOG)"
        # setsid: the daemon must outlive this shell and not get its terminal's signals.
        # 9>&-: the daemon must not inherit (and so hold forever) the lock.
        setsid dockerd "${opts[@]}" >>"$LOG" 2>&1 </dev/null 9>&- &
    fi
    wait_until_ready
    ensure_swarm
}

ensure_swarm() {
    [[ -n $SWARM_ADDR ]] || return 0
    local cli state
    cli=$(docker_cli)
    state=$("$cli" -H "unix://$SOCK" info --format '{{.Swarm.LocalNodeState}}')
    [[ $state == active ]] && return 0
    say "making the engine a single-node Swarm manager on $SWARM_ADDR (it was $state)"
    "$cli" -H "unix://$SOCK" swarm init --advertise-addr "$SWARM_ADDR" --listen-addr "$SWARM_ADDR" \
        >/dev/null || die "docker swarm init failed"
}

wait_until_ready() {
    local deadline=$((SECONDS + START_TIMEOUT))
    until answers; do
        if ((SECONDS >= deadline)); then
            say "dockerd did not answer within ${START_TIMEOUT}s; last lines of $LOG:"
            tail -n 30 "$LOG" >&2 || true
            exit 1
        fi
        sleep 0.5
    done
    say "engine ready on unix://$SOCK"
}

stop() {
    local pid
    if ! pid=$(running_pid); then
        say "no dockerd started from $PIDFILE is running"
        return 0
    fi
    say "stopping dockerd (pid $pid)"
    kill -TERM "$pid"
    # dockerd stops its containers first (10 s grace each), so allow more than that.
    local deadline=$((SECONDS + 45))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            say "dockerd (pid $pid) ignored SIGTERM for 45s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    release_mounts
    say "dockerd stopped"
}

# dockerd leaves its default network namespace mounted under the exec-root.
release_mounts() {
    local target
    awk '{print $2}' /proc/mounts | while read -r target; do
        if [[ $target == "$EXEC_ROOT"/* ]]; then
            umount "$target" || say "could not unmount $target"
        fi
    done
}

# Serialises start/stop/lease changes between concurrent callers.
lock() {
    mkdir -p "$ROOT"
    exec 9>"$ROOT/lock"
    flock 9
}

live_leases() {
    local lease
    for lease in "$LEASES"/*; do
        [[ -e $lease ]] || continue
        if kill -0 "${lease##*/}" 2>/dev/null; then
            echo "${lease##*/}"
        else
            rm -f "$lease"
        fi
    done
}

acquire() {
    local holder=$1
    [[ $holder =~ ^[0-9]+$ ]] || die "acquire needs the pid that holds the lease"
    lock
    if answers; then
        say "engine already answers on unix://$SOCK"
        ensure_swarm
    else
        start
        touch "$LEASED_MARK"
    fi
    mkdir -p "$LEASES"
    touch "$LEASES/$holder"
}

release() {
    local holder=$1
    [[ $holder =~ ^[0-9]+$ ]] || die "release needs the pid that holds the lease"
    lock
    rm -f "$LEASES/$holder"
    local others
    others=$(live_leases | paste -sd " " -)
    if [[ -n $others ]]; then
        say "engine still leased by pid(s) $others; leaving it running"
    elif [[ -f $LEASED_MARK ]]; then
        stop
        rm -f "$LEASED_MARK"
    fi
}

status() {
    if answers; then
        say "engine answers on unix://$SOCK"
        return 0
    fi
    say "no engine answers on unix://$SOCK"
    return 1
}

case ${1:-} in
    start) lock; start ;;
    stop) lock; stop; rm -f "$LEASED_MARK" ;;
    acquire) acquire "${2:-}" ;;
    release) release "${2:-}" ;;
    env) echo "export DOCKER_HOST=unix://$SOCK" ;;
    options) dockerd_options ;;
    status) status ;;
    *) echo "usage: $0 start|stop|env|status|options|acquire PID|release PID" >&2; exit 2 ;;
esac
