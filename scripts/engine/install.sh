#!/usr/bin/env bash
# Create .venv-engine (vLLM on CPU) from scripts/engine/requirements.lock; a no-op when it is current.
#
# The stamp file holds the sha256 of the lock it was built from: a changed lock (or an
# interrupted install, which leaves no stamp) rebuilds the venv from scratch, so the venv
# always holds exactly the lock's packages.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
VENV="${ENGINE_VENV:-.venv-engine}"
LOCK=scripts/engine/requirements.lock
STAMP="$VENV/.installed"

want="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "$VENV is up to date with $LOCK"
  exit 0
fi

start=$SECONDS
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$LOCK"
echo "$want" > "$STAMP"
echo "$VENV built from $LOCK in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1))"
