#!/usr/bin/env bash
# Builds the crawler image archiver launches: archiver/crawler:<version of crawler/>.
#
#   eval "$(bash scripts/docker-engine.sh env)"   # or any DOCKER_HOST
#   bash scripts/build-crawler-image.sh
#
# Environment:
#   ARCHIVER_CRAWLER_IMAGE  tag to build (default archiver/crawler:<version>)
#   ARCHIVER_BASE_IMAGE     base image (default: local archiver/base:bookworm-chromium, built
#                           here with debootstrap when missing, since no registry may be
#                           reachable; it holds Debian's chromium for the crawler's browser mode)
#   ARCHIVER_FORCE_BUILD=1  build even when an image of the same content exists
#
# When the base has /usr/bin/chromium the image is labelled org.archiver.chromium (its path)
# and org.archiver.chromium.version (`chromium --version`): `archiver doctor` reads them.
# The image carries a label with a hash of its inputs (context files, base image id,
# version); when an image with that label exists the build is skipped and it is tagged.
set -euo pipefail
# dockerd and debootstrap live in sbin, which a non-login root shell may lack.
export PATH=$PATH:/usr/sbin:/sbin

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONTEXT=$REPO/crawler
# A new name whenever the packages below change: the base is built only when missing.
LOCAL_BASE=archiver/base:bookworm-chromium
IMAGE_CHROMIUM=/usr/bin/chromium
HASH_LABEL=org.archiver.content-hash

say() { printf 'build-crawler-image: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

docker_cli() {
    if [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; else command -v docker; fi
}
DOCKER=$(docker_cli) || die "no docker client; run scripts/docker-engine.sh start"
# The legacy builder: it needs no buildx plugin and honours --network host on engine 20.10.
export DOCKER_BUILDKIT=0

crawler_version() {
    # The [project] table's version line; the file is ours, so a simple match suffices.
    awk -F'"' '/^\[/{section=$0} section=="[project]" && /^version *=/{print $2; exit}' \
        "$CONTEXT/pyproject.toml"
}

# The Debian mirror this machine's apt uses for bookworm (never a name written here).
apt_mirror() {
    local file
    for file in /etc/apt/sources.list.d/*.sources; do
        [[ -f $file ]] || continue
        awk '
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { if (suite && uri) { print uri; exit } suite = 0; uri = ""; next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite = 1 }
            END { if (suite && uri) print uri }
        ' "$file" | head -n 1
    done | head -n 1 | grep . && return 0
    if [[ -f /etc/apt/sources.list ]]; then
        # deb [options] URI SUITE COMPONENTS...
        awk '$1 == "deb" { sub(/^deb[ \t]+(\[[^]]*\][ \t]+)?/, ""); if ($2 == "bookworm") { print $1; exit } }' \
            /etc/apt/sources.list | grep . && return 0
    fi
    return 1
}

apt_install() {
    [[ $(id -u) -eq 0 ]] || die "installing $* needs root"
    say "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >&2
}

build_local_base() {
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    local mirror rootfs started=$SECONDS
    mirror=$(apt_mirror) || die "no bookworm mirror found in /etc/apt/sources.list(.d)"
    rootfs=$(mktemp -d /var/tmp/archiver-rootfs.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the path is fixed
    trap "umount '$rootfs/proc' 2>/dev/null; rm -rf '$rootfs'" EXIT
    say "building $LOCAL_BASE with debootstrap from $mirror (a few minutes: chromium)"
    # chromium brings its own libraries; fonts-liberation gives pages metric-compatible
    # Arial/Times/Courier, so screenshots and layout-driven behaviors look as in a desktop browser.
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
    # chromium goes in with the new system's apt, not debootstrap's --include: debootstrap's
    # own configuration pass cannot order chromium's desktop dependencies (dconf-service
    # fails to configure there, five times). Services must not start inside the chroot.
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
    printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
    chmod 755 "$rootfs/usr/sbin/policy-rc.d"
    mount -t proc proc "$rootfs/proc"
    local installed=0
    chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive sh -c \
        'apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-liberation' \
        >>"$rootfs.log" 2>&1 || installed=$?
    umount "$rootfs/proc"
    rm -f "$rootfs/usr/sbin/policy-rc.d" "$rootfs/etc/resolv.conf"
    ((installed == 0)) || { tail -n 30 "$rootfs.log" >&2; die "installing chromium in the base failed (log: $rootfs.log)"; }
    rm -f "$rootfs.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        - "$LOCAL_BASE" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
    say "built $LOCAL_BASE in $((SECONDS - started))s"
}

base_image() {
    if [[ -n ${ARCHIVER_BASE_IMAGE:-} ]]; then
        echo "$ARCHIVER_BASE_IMAGE"
        return
    fi
    if ! "$DOCKER" image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        build_local_base
    fi
    echo "$LOCAL_BASE"
}

# Files of the build context, as the .dockerignore leaves them (kept in step by hand).
context_files() {
    (cd "$CONTEXT" && find . \
        \( -name __pycache__ -o -name '*.egg-info' -o -name .pytest_cache -o -name .ruff_cache \
           -o -path ./.venv -o -path ./build -o -path ./dist -o -path ./tests \) -prune \
        -o -type f ! -name '*.pyc' -print | LC_ALL=C sort)
}

# The base's Chromium version, or nothing when it has none (e.g. python:3.11-slim).
base_chromium() {
    "$DOCKER" run --rm --network none --entrypoint "$IMAGE_CHROMIUM" "$1" --version 2>/dev/null \
        | head -n 1 | tr -cd '[:print:]' || true
}

content_hash() {
    local base=$1 version=$2 base_id
    base_id=$("$DOCKER" image inspect --format '{{.Id}}' "$base" 2>/dev/null || echo "$base")
    {
        echo "base $base_id"
        echo "version $version"
        (cd "$CONTEXT" && context_files | while read -r f; do
            printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$f"
        done)
    } | sha256sum | cut -c1-32
}

main() {
    [[ -f $CONTEXT/pyproject.toml ]] || die "no crawler distribution at $CONTEXT"
    "$DOCKER" info >/dev/null 2>&1 \
        || die "no Docker engine at ${DOCKER_HOST:-the default socket}; run scripts/docker-engine.sh start"
    local version tag base hash existing
    version=$(crawler_version)
    [[ -n $version ]] || die "no version in $CONTEXT/pyproject.toml"
    tag=${ARCHIVER_CRAWLER_IMAGE:-archiver/crawler:$version}
    base=$(base_image)
    hash=$(content_hash "$base" "$version")

    existing=$("$DOCKER" images --quiet --filter "label=$HASH_LABEL=$hash" | head -n 1)
    if [[ -n $existing && ${ARCHIVER_FORCE_BUILD:-0} != 1 ]]; then
        "$DOCKER" tag "$existing" "$tag"
        say "$tag is up to date (content $hash)"
        echo "$tag"
        return
    fi

    say "building $tag from $base (content $hash)"
    local started=$SECONDS chromium
    local -a chromium_labels=()
    chromium=$(base_chromium "$base")
    if [[ -n $chromium ]]; then
        chromium_labels=(--label "org.archiver.chromium=$IMAGE_CHROMIUM"
                         --label "org.archiver.chromium.version=$chromium")
    else
        say "warning: $base has no $IMAGE_CHROMIUM: the image crawls over HTTP only"
    fi
    # A copy of the context, so that the proxy's CA bundle never lands in the source tree.
    local build_dir
    build_dir=$(mktemp -d /var/tmp/archiver-crawler-build.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the path is fixed
    trap "rm -rf '$build_dir'" EXIT
    mkdir "$build_dir/context"
    (cd "$CONTEXT" && context_files | tar -cf - -T -) | tar -C "$build_dir/context" -xf -
    # pip inside the build reaches PyPI through whatever proxy this host trusts.
    local ca=/etc/ssl/certs/ca-certificates.crt
    if [[ -s $ca ]]; then cp "$ca" "$build_dir/context/.build-ca.crt"; fi
    if ! "$DOCKER" build --network host --force-rm \
        --build-arg "BASE_IMAGE=$base" --build-arg "CRAWLER_VERSION=$version" \
        --label "$HASH_LABEL=$hash" "${chromium_labels[@]}" \
        --tag "$tag" "$build_dir/context" >"$build_dir/build.log" 2>&1; then
        tail -n 40 "$build_dir/build.log" >&2
        die "docker build of $tag failed"
    fi
    rm -rf "$build_dir"
    trap - EXIT
    # Earlier builds that lost their tag to this one, and the untagged builder stages,
    # would pile up under a fixed data-root.
    "$DOCKER" image prune --force --filter "label=$HASH_LABEL" >/dev/null
    "$DOCKER" image prune --force --filter "label=org.archiver.build-stage" >/dev/null
    say "built $tag in $((SECONDS - started))s"
    echo "$tag"
}

main "$@"
