#!/usr/bin/env bash
# What an explanation costs and what its A/A shows on this machine (docs/explain.md): each tiny
# model's vanilla case compared with itself, explained (--explain), five times; then the same
# cases against a candidate with every injection of tests/side_injections (an extra matmul, a
# 10 ms sleep in a module hook, a 50 MiB buffer, a loss x1.01), three times ($AA and $INJECTED
# set how many of each). One pair per
# comparison: the verdict is not what is measured here. Run it on an otherwise idle machine; the
# JSON files and logs go to $OUT (default explain-results), benchmarks/explain/table.py tabulates them.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-explain-results}"
MODELS="${MODELS:-tiny-bert,tiny-gpt2,tiny-llama,tiny-t5}"
mkdir -p "$OUT"
export PERFSUITE_BASE_PYTHON="$(command -v python)"
INJECTING="$PWD/tests/side_injections/python"

compare() {  # NAME CANDIDATE
    local name=$1 candidate=$2
    /usr/bin/time -f "$name: %e s" perfsuite ab --base current --candidate "$candidate" --models "$MODELS" \
        --strategies vanilla --pairs 1 --max-pairs 1 --explain --json "$OUT/$name.json" 2>&1 \
        | tee "$OUT/$name.log" | grep -E "^perfsuite ab:|explained in|: [0-9.]+ s$" || true
}

for i in $(seq "${AA:-5}"); do
    PERFSUITE_SIDE_INJECT= compare "aa-$i" current
done
for i in $(seq "${INJECTED:-3}"); do
    PERFSUITE_SIDE_INJECT=matmul,sleep,buffer,loss compare "injected-$i" "$INJECTING"
done
python benchmarks/explain/table.py "$OUT"
