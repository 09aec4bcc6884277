#!/usr/bin/env bash
# Install assay, then run the main job on its embedded defaults with the bundled SCRIPTED model
# (a replay of examples/scripts/demo.yaml, not a real LLM; no API key needed):
#   1. one `assay check` on the example snapshot prod-eu;
#   2. `assay demo`: a private redis-server, a Celery worker, and a batch of the same predicate
#      over the example fleet (examples/snapshots/*), ending with the verdict table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PREDICATE="every Deployment in namespace prod has at least 2 ready replicas"
set +e
.venv/bin/assay check --snapshot examples/snapshots/prod-eu --scripted examples/scripts/demo.yaml "$PREDICATE"
echo "assay check exited with $? (0 true, 1 false, 2 poorly posed, 3 cannot determine)"
set -e
.venv/bin/assay demo
