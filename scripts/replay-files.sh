#!/usr/bin/env bash
# Fetches ReplayWeb.page's two files (ui.js, sw.js) into crawls/replayweb/ (or the folder
# given) for the replay origin (crawls/replay_views.py serves them; the admin never does).
# They are not in the repository, nor in archiver's wheel: they come from the npm registry (`npm pack`), and the tarball must match
# the sha512 integrity the registry publishes for that version (`npm view`), or nothing is
# installed.
#
#   bash scripts/replay-files.sh            # does nothing if this version is already there
#   REPLAYWEBPAGE_VERSION=2.5.3 bash scripts/replay-files.sh
#   bash scripts/replay-files.sh "$ARCHIVER_DATA_DIR/replay"   # for an installed wheel
#                                           # (the replay origin serves it from there)
set -euo pipefail
# The folder given may be the first thing created in a data dir, which must stay private.
umask 077
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=${REPLAYWEBPAGE_VERSION:-2.5.3}
DEST=${1:-$REPO/crawls/replayweb}

say() { printf 'replay-files: %s\n' "$*" >&2; }

# Checkouts from before the replay origin kept these files in the admin's static files, where
# a wheel built from the checkout would still carry them: that folder is gone for good.
rm -rf "$REPO/crawls/static/crawls/replay"

if [[ -f $DEST/.version && $(<"$DEST/.version") == "$VERSION" && -f $DEST/ui.js && -f $DEST/sw.js
      && -f $DEST/index.html ]]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing npm (to fetch ReplayWeb.page)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq npm >/dev/null
    else
        say "npm is not on PATH: install it (apt-get install npm) for the admin's Replay page"
        exit 1
    fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
expected=$(npm view "replaywebpage@$VERSION" dist.integrity)
[[ $expected == sha512-* ]] || { say "the registry published no sha512 integrity for $VERSION"; exit 1; }
tarball=$(cd "$work" && npm pack --silent "replaywebpage@$VERSION")
actual="sha512-$(openssl dgst -sha512 -binary "$work/$tarball" | base64 -w0)"
if [[ $actual != "$expected" ]]; then
    say "replaywebpage-$VERSION does not match the registry's integrity ($actual != $expected)"
    exit 1
fi
tar -xzf "$work/$tarball" -C "$work" package/ui.js package/sw.js
mkdir -p "$DEST"
install -m 0644 "$work/package/ui.js" "$work/package/sw.js" "$DEST/"
# ReplayWeb.page frames <replay base>/?...; its service worker answers that once active. Until
# then this placeholder is what loads (the replay origin's, framable), so the player can see
# the worker is not in control yet and reload the frame.
printf '<!doctype html><title>ReplayWeb.page</title>\n' >"$DEST/index.html"
echo "$VERSION" >"$DEST/.version"
say "ReplayWeb.page $VERSION installed in ${DEST#"$REPO"/} (integrity $expected)"
