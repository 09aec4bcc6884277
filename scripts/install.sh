#!/usr/bin/env bash
# Install assay into ./.venv, plus redis-server when it is missing (and, for the test extra,
# prometheus-alertmanager).
# Usage: scripts/install.sh [extra]   e.g. scripts/install.sh test (which adds the bench extra)
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"

if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "installing redis-server (apt-get)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  elif command -v brew >/dev/null 2>&1; then
    brew install redis
  else
    echo "redis-server is missing: install it with your package manager (e.g. sudo apt-get install redis-server)" >&2
    exit 1
  fi
fi

# The alerting tests run a real Alertmanager; without one they skip and say why.
if [ "$extra" = "test" ] && ! command -v prometheus-alertmanager >/dev/null 2>&1 \
    && ! command -v alertmanager >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "installing prometheus-alertmanager (apt-get): the alerting tests run a real one" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-alertmanager >/dev/null
  else
    echo "note: Alertmanager is missing, so its tests will skip (sudo apt-get install prometheus-alertmanager)" >&2
  fi
fi

echo "install: creating .venv" >&2
python3 -m venv .venv
log=.venv/install.log
spec="."
[ -n "$extra" ] && spec=".[$extra]"
# The test set-up also gets the bench extra (py-spy), so bench/ runs from the same venv.
[ "$extra" = "test" ] && spec=".[test,bench]"
# pip's and setuptools' chatter goes to the log; it is shown only when the install fails.
# A first install takes a minute or more: say so, then every few seconds what pip is at
# (the last package it collected or what it installs), so a silent terminal never looks hung.
# constraints.txt: the versions the tests last passed on, so a fresh clone installs those.
echo "install: installing assay${extra:+ with its $extra extras} and its dependencies into" \
  ".venv (about a minute the first time; pip's log: $log)" >&2
{ .venv/bin/python -m pip install -q --upgrade pip \
    && .venv/bin/python -m pip install --progress-bar off -c constraints.txt -e "$spec"; } \
  >"$log" 2>&1 &
pip_pid=$!
every="${INSTALL_PROGRESS_EVERY:-10}"
started=$SECONDS
shown=$SECONDS
while kill -0 "$pip_pid" 2>/dev/null; do
  sleep 1
  if kill -0 "$pip_pid" 2>/dev/null && [ $((SECONDS - shown)) -ge "$every" ]; then
    shown=$SECONDS
    at=$(grep -E '^(Collecting|Installing|Building|Downloading|Successfully)' "$log" \
      | tail -n 1 | cut -c1-70 || true)
    echo "install: $((SECONDS - started))s${at:+, pip: $at}" >&2
  fi
done
if ! wait "$pip_pid"; then
  cat "$log" >&2
  echo "installing assay failed (log above, also in $log)" >&2
  exit 1
fi
echo "install: done in $((SECONDS - started))s" >&2
