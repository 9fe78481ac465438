#!/usr/bin/env bash
# perfsuite ab's false alarms and sensitivity on this machine (docs/ab.md): on the quick set
# (`perfsuite run`'s default: 10 tiny-bert cases), three A/A comparisons, then a candidate
# slowed 5% everywhere, then one whose Adafactor alone is slowed 5% (benchmarks/ab/slow-python).
# Run it on an otherwise idle machine; results go to $OUT (default ab-results/).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-ab-results}"
mkdir -p "$OUT"
SLOW="$PWD/benchmarks/ab/slow-python"
export PERFSUITE_BASE_PYTHON="$(command -v python)"
for i in 1 2 3; do
    /usr/bin/time -f "%e s" perfsuite ab --base current --candidate current --json "$OUT/aa-$i.json" "$@" || true
done
PERFSUITE_SLOWDOWN=0.05 /usr/bin/time -f "%e s" \
    perfsuite ab --base current --candidate "$SLOW" --json "$OUT/uniform-5.json" "$@" || true
PERFSUITE_SLOWDOWN=0.05 PERFSUITE_SLOWDOWN_OPTIMIZER=Adafactor /usr/bin/time -f "%e s" \
    perfsuite ab --base current --candidate "$SLOW" --json "$OUT/adafactor-5.json" "$@" || true
