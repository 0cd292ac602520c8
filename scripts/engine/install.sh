#!/usr/bin/env bash
# Create .venv-engine (vLLM on CPU) from scripts/engine/requirements.lock; a no-op when it is current.
#
# Wheels are kept in a wheelhouse (~/.cache/eaglefeed/engine-wheels, 3.4 GB): pip's own HTTP cache
# cannot be relied on (it stores nothing when the registry's responses carry no cache headers),
# so the venv is installed offline from that folder, after downloading whatever wheel it lacks.
# The stamp file holds the sha256 of the lock it was built from: a changed lock (or an
# interrupted install, which leaves no stamp) rebuilds the venv from scratch, so the venv
# always holds exactly the lock's packages.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
VENV="${ENGINE_VENV:-.venv-engine}"
LOCK=scripts/engine/requirements.lock
WHEELS="${ENGINE_WHEELHOUSE:-${EAGLEFEED_CACHE_DIR:-$HOME/.cache/eaglefeed}/engine-wheels}"
STAMP="$VENV/.installed"

want="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  touch "$STAMP"
  echo "$VENV is up to date with $LOCK"
  exit 0
fi

start=$SECONDS
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/pip" --quiet --disable-pip-version-check)
offline=("${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" -r "$LOCK")
# pip resolves every pin before installing anything, so a wheelhouse that lacks a wheel fails fast.
if ! "${offline[@]}" 2>/dev/null; then
  echo "downloading the wheels missing from $WHEELS"
  "${pip[@]}" download --no-deps --only-binary=:all: -d "$WHEELS" -r "$LOCK"
  "${offline[@]}"
fi
echo "$want" > "$STAMP"
echo "$VENV built from $LOCK in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1))"
