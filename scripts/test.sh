#!/usr/bin/env bash
# Install assay with its test tools, then run lint, types, the schema drift check and the tests.
# The install (scripts/install.sh test) also apt-installs what the tests run for real when it
# is missing and the user is root: redis-server, and prometheus-alertmanager (the alerting
# tests run a real Alertmanager; without one they skip and say so).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test.sh: installs assay with its test tools into ./.venv, plus redis-server and" \
  "prometheus-alertmanager via apt-get when they are missing (as root); then ruff, mypy," \
  "the schema drift check and pytest" >&2
bash scripts/install.sh test
export LITELLM_LOCAL_MODEL_COST_MAP=True
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m schemas.generate --check
.venv/bin/python -m pytest -q "$@"
