#!/usr/bin/env bash
# Install assay with its test tools, then run lint, types, the schema drift check and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
export LITELLM_LOCAL_MODEL_COST_MAP=True
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m schemas.generate --check
.venv/bin/python -m pytest -q "$@"
