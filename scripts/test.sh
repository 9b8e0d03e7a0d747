#!/usr/bin/env bash
# archiver's test command: bash scripts/test.sh [pytest args]
#
# Does all set-up on a fresh Debian or Ubuntu machine (as root, with Python 3.11 or newer): system
# packages, the .venv, a private Docker engine, the crawler image; then runs pytest with
# Docker required (docker tests fail instead of skipping) and stops the engine again if
# this run started it. Exits with pytest's exit code.
#
# pytest runs in parallel workers (pytest-xdist): most of the suite waits on crawls, daemons,
# Chromium and Docker rather than computing, so more workers than cores pay. Each test file
# runs whole on one worker (--dist loadfile: a file's tests share its fixtures and may share
# an engine-wide resource, e.g. the swarm's node), the costliest files first
# (tests/costly_files.txt). At the end it prints the 25 slowest tests, the 10 costliest files
# and how long each phase took. Arguments given are passed on after these defaults, so
# `-n 0` runs in one process and `-n 2` with two workers.
#
# Environment: ARCHIVER_PYTHON (the interpreter .venv is created with; default: the first
# of python3.13, python3.12, python3.11, python3 that is 3.11 or newer, see lib/python.sh),
# ARCHIVER_TEST_POSTGRES_URL (default: the local server's `test` database when it answers,
# or always when CI=true), ARCHIVER_BASE_IMAGE / ARCHIVER_CRAWLER_IMAGE (see
# build-crawler-image.sh), ARCHIVER_DOCKER_ROOT (see docker-engine.sh), ARCHIVER_TEST_WORKERS
# (pytest-xdist's workers; default 4).
set -euo pipefail
# dockerd and debootstrap live in sbin, which a non-login root shell may lack.
export PATH=$PATH:/usr/sbin:/sbin
# The suite starts over a thousand Python processes (commands, daemons, crawlers, gunicorn).
# With PYTHONDONTWRITEBYTECODE set (as on this project's CI machine) and uv's install (which,
# unlike pip's, compiles nothing), each compiled every module it imported from source:
# about 0.8 s of CPU per process, 'archiver status' 1.25 s instead of 0.45 s. The bytecode
# goes to __pycache__ (git ignores it) in .venv and the checkout.
unset PYTHONDONTWRITEBYTECODE

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
VENV=$REPO/.venv
ENGINE=$REPO/scripts/docker-engine.sh
# shellcheck source=lib/python.sh
source "$REPO/scripts/lib/python.sh"

say() { printf 'test.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

TIMINGS=()
PHASE_NAME=""
PHASE_START=0
phase() {
    local now=$SECONDS
    [[ -n $PHASE_NAME ]] && TIMINGS+=("$PHASE_NAME $((now - PHASE_START))s")
    PHASE_NAME=$1
    PHASE_START=$now
    [[ -n $PHASE_NAME ]] && say "$PHASE_NAME"
    return 0
}

install_system_packages() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    command -v wget >/dev/null 2>&1 || missing+=(wget)
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    # The admin's browser tests (tests/admin): Debian's Chromium and its WebDriver; npm
    # fetches ReplayWeb.page (scripts/replay-files.sh).
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    # Only needed to build the local base image; small, and saves a second apt-get update.
    if [[ -z ${ARCHIVER_BASE_IMAGE:-} ]] && ! command -v debootstrap >/dev/null 2>&1; then
        missing+=(debootstrap)
    fi
    ((${#missing[@]})) || return 0
    [[ $(id -u) -eq 0 ]] || die "missing ${missing[*]}; install them or run as root"
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine may be running another apt (its first upgrades): wait for its lock, do not fail.
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
}

# Reinstalls only when the dependency declarations (or the interpreter) changed.
install_venv() {
    if [[ ! -x $VENV/bin/python ]]; then
        local python venv_package
        python=$(find_python) || die "no suitable Python (see above)"
        if venv_package=$(venv_package_missing "$python"); then
            [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1 ||
                die "$python cannot create a virtualenv: apt-get install $venv_package"
            say "apt-get install $venv_package"
            export DEBIAN_FRONTEND=noninteractive
            apt-get -o DPkg::Lock::Timeout=600 update -qq
            apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$venv_package" >/dev/null
        fi
        say "creating .venv with $python ($(python_version_of "$python"))"
        if uv=$(find_uv); then
            # --seed: tests build and install wheels with the venv's own pip.
            "$uv" venv --quiet --seed --python "$python" "$VENV"
        else
            "$python" -m venv "$VENV"
        fi
    fi
    local stamp_file=$VENV/.archiver-install-stamp stamp
    stamp=$({
        echo "$REPO"
        "$VENV/bin/python" --version
        cat pyproject.toml crawler/pyproject.toml
    } | sha256sum | cut -d' ' -f1)
    if [[ -f $stamp_file && $(<"$stamp_file") == "$stamp" ]]; then
        say "virtualenv is up to date"
        return
    fi
    # Older checkouts installed the crawler as a distribution of its own; archiver's carries it.
    "$VENV/bin/python" -m pip uninstall --quiet --yes archiver-crawler 2>/dev/null || true
    local uv
    # From uv's cache alone first: asking PyPI whether each of ~150 cached packages is still
    # current cost 45 of the step's 64 s on a busy machine.
    if uv=$(find_uv) && { "$uv" pip install --quiet --offline --python "$VENV/bin/python" -e '.[test]' 2>/dev/null ||
            "$uv" pip install --quiet --python "$VENV/bin/python" -e '.[test]'; }; then
        :
    else
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
    fi
    echo "$stamp" >"$stamp_file"
}

# uv installs the suite's ~150 packages from its cache in seconds where pip takes a minute
# (measured on the 2-core machine: 59 s against 18 s); it is kept outside the clone, so a
# fresh clone pays only for its own editable install. Without it, or without PyPI, pip does.
UV_HOME=${ARCHIVER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/archiver}/uv
find_uv() {
    if [[ ! -x $UV_HOME/bin/uv ]]; then
        local python
        python=$(find_python 2>/dev/null) || return 1
        rm -rf "$UV_HOME"
        { "$python" -m venv "$UV_HOME" &&
            "$UV_HOME/bin/python" -m pip install --quiet --disable-pip-version-check uv; } \
            >/dev/null 2>&1 || { rm -rf "$UV_HOME"; return 1; }
    fi
    echo "$UV_HOME/bin/uv"
}

postgres_answers() {
    timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5432' 2>/dev/null
}

release_engine() {
    bash "$ENGINE" release $$ || say "could not release the Docker engine"
}

main() {
    phase "system packages"
    install_system_packages
    phase "virtualenv"
    install_venv

    phase "replay files"
    bash scripts/replay-files.sh

    phase "docker engine"
    bash "$ENGINE" acquire $$
    trap release_engine EXIT
    eval "$(bash "$ENGINE" env)"
    export DOCKER_HOST

    phase "crawler image"
    bash scripts/build-crawler-image.sh >/dev/null

    export ARCHIVER_REQUIRE_DOCKER=1
    if [[ -z ${ARCHIVER_TEST_POSTGRES_URL:-} ]] && { [[ ${CI:-} == true ]] || postgres_answers; }; then
        export ARCHIVER_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test
    fi

    phase "tests"
    local rc=0 junit
    junit=$(mktemp /tmp/archiver-junit.XXXXXX)
    # The default data dir (./data) is a developer's own; tests that do not make one of their
    # own share this one, removed after the run.
    ARCHIVER_DATA_DIR=$(mktemp -d /tmp/archiver-test-data.XXXXXX)
    export ARCHIVER_DATA_DIR
    "$VENV/bin/python" -m pytest -n "${ARCHIVER_TEST_WORKERS:-4}" --dist loadfile \
        --no-loadscope-reorder --durations=25 --junitxml="$junit" "$@" || rc=$?
    phase ""
    # Refresh the suite's order after a whole run: python -m tests.costs JUNIT --write
    [[ -s $junit ]] && "$VENV/bin/python" -m tests.costs "$junit" >&2 || true
    rm -rf "$junit" "$ARCHIVER_DATA_DIR"
    say "timings: $(IFS=,; echo "${TIMINGS[*]}" | sed 's/,/, /g')"
    return "$rc"
}

main "$@"
