#!/usr/bin/env bash
# The README's main job on a CPU machine: train the return-hard arm on the real ALFWorld engine,
# then compare its converged window and render its model card, all from one fresh runs.db.
#
#   bash scripts/main_job.sh            # short schedule (40 steps, 2-6 minutes on 2 cores)
#   bash scripts/main_job.sh --full     # the full recipe: 200 steps x seeds 0,1,2
#   bash scripts/main_job.sh [--full] OUT_DIR   (default: demo/, replaced on each run)
set -euo pipefail

full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi
out=${1:-demo}
rm -rf "$out"
mkdir -p "$out"
db="$out/runs.db"

if [ "$full" = 1 ]; then
  ccpo --db "$db" train --arm return-hard --run return-hard --seeds 0,1,2
  runs="return-hard-seed0 return-hard-seed1 return-hard-seed2"
  card_run=return-hard-seed0
else
  ccpo --db "$db" train --arm return-hard --run demo-return-hard --steps 40 --eval-every 10
  runs="demo-return-hard"
  card_run=demo-return-hard
fi

# The window starts at 7/15 of each run's total steps (step 19 of 40, 94 of 200), as on the seed card.
# shellcheck disable=SC2086
ccpo --db "$db" compare $runs --plot "$out/learning-curve.png"
ccpo --db "$db" card --run "$card_run" --status final --output "$out/card/README.md"
echo "model card: $out/card/README.md   learning curve: $out/learning-curve.png"
