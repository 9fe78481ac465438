#!/usr/bin/env bash
# perfsuite ab's false alarms and sensitivity on this machine (docs/ab.md): three A/A comparisons,
# then a candidate slowed 5% everywhere, then one whose Adafactor alone is slowed 5%
# (benchmarks/ab/slow-python), each on tiny-bert's vanilla, bf16 and adafactor (other cases: pass
# perfsuite ab's selection options). Run it on an otherwise idle machine; results go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-ab-results}"
mkdir -p "$OUT"
SLOW="$PWD/benchmarks/ab/slow-python"
export PERFSUITE_BASE_PYTHON="$(command -v python)"
[ $# -gt 0 ] || set -- --models tiny-bert --strategies vanilla,bf16,adafactor
PERFSUITE_SLOWDOWN=0.05 /usr/bin/time -f "%e s" \
    perfsuite ab --base current --candidate "$SLOW" --json "$OUT/uniform-5.json" "$@" || true
PERFSUITE_SLOWDOWN=0.05 PERFSUITE_SLOWDOWN_OPTIMIZER=Adafactor /usr/bin/time -f "%e s" \
    perfsuite ab --base current --candidate "$SLOW" --json "$OUT/adafactor-5.json" "$@" || true
for i in 1 2 3; do
    /usr/bin/time -f "%e s" perfsuite ab --base current --candidate current --json "$OUT/aa-$i.json" "$@" || true
done
