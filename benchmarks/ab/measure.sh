#!/usr/bin/env bash
# perfsuite ab's false alarms and sensitivity on this machine (docs/ab-sensitivity.md): three A/A comparisons,
# then a candidate slowed 5% everywhere, one slowed 8% everywhere, and one whose Adafactor alone is
# slowed 5% (benchmarks/ab/slow-python, against benchmarks/ab/control-python: the same interpreter
# set-up without the spin); each on perfsuite ab's default selection (the quick set: tiny-bert's
# 10 cases on a CPU) unless selection options are passed (`--every-push`: the 35 cases `pytest`
# runs). Run it on an otherwise idle machine; the JSON files and logs go to $OUT (default
# ab-results), `perfsuite report $OUT/X.json -o DIR` draws one, benchmarks/ab/table.py tabulates them.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-ab-results}"
mkdir -p "$OUT"
SLOW="$PWD/benchmarks/ab/slow-python"
CONTROL="$PWD/benchmarks/ab/control-python"  # the same interpreter set-up, without the spin
export PERFSUITE_BASE_PYTHON="$(command -v python)"

compare() {  # NAME BASE CANDIDATE [perfsuite ab options...]
    local name=$1 base=$2 candidate=$3
    shift 3
    /usr/bin/time -f "$name: %e s" perfsuite ab --base "$base" --candidate "$candidate" \
        --json "$OUT/$name.json" "$@" 2>&1 | tee "$OUT/$name.log" | grep -E "^perfsuite ab:|: [0-9.]+ s$" || true
}

for i in 1 2 3; do
    compare "aa-$i" current current "$@"
done
PERFSUITE_SLOWDOWN=0.05 compare uniform-5 "$CONTROL" "$SLOW" "$@"
PERFSUITE_SLOWDOWN=0.08 compare uniform-8 "$CONTROL" "$SLOW" "$@"
PERFSUITE_SLOWDOWN=0.05 PERFSUITE_SLOWDOWN_OPTIMIZER=Adafactor compare adafactor-5 "$CONTROL" "$SLOW" "$@"
