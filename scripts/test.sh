#!/usr/bin/env bash
# The test suite in two lanes, each spread over the machine's cores (pytest-xdist): the fast tests,
# then the ones marked slow (more than about 3 s: training, engine games in worker processes, Ray,
# wheel builds). Each lane ends with pytest's own summary line and its 15 slowest tests.
#
#   scripts/test.sh [PYTEST_ARGS...]        # PYTHON (default .venv/bin/python), CCPO_TEST_WORKERS (default auto)
#
# A test file's tests stay on one worker (--dist loadfile), so a module's fixtures are built once.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
lane() {
  local name=$1 marker=$2 started
  shift 2
  started=$(date +%s)
  "$PY" -m pytest -q -p no:cacheprovider -n "${CCPO_TEST_WORKERS:-auto}" --dist loadfile \
    --durations=15 -m "$marker" "$@"
  echo "$name lane: $(($(date +%s) - started)) s"
}
lane fast "not slow" "$@"
lane slow "slow" "$@"
