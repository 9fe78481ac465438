#!/usr/bin/env bash
# The GPU tier's usual jobs on a GPU machine, in stages that each fit a 10-minute job (docs/gpu.md).
#
#   bash benchmarks/gpu/run.sh STAGE [ARGS...]      # on the device, after .ci/gpu-image/setup install
#
# Every stage writes its logs and JSON under $OUT (a folder the job keeps, as a CI job's artifacts), and
# its baselines under baselines/<gpu>/, which the stage copies to $OUT/baselines.tgz for committing.
#   smoke             perfsuite run's quick set on the GPU (bert-base-uncased, 10 cases), timed
#   claims            the GPU-only strategy claims (pytest -m gpu tests/test_strategy_claims.py)
#   refresh EXPR [N]  perfsuite baselines refresh -k EXPR --repeats N (default 3) on the GPU, stopping itself at
#                     $REFRESH_LIMIT_S seconds where that is set (the cases it finished are written)
#   missing S [EXPR [N]]  the cases (matching EXPR) with no baseline on this GPU yet, for at most S seconds,
#                     N repeats (default 2): what finishes is written, the next call goes on from there
#   compare [EXPR]    pytest -m gpu --benchmark-compare [-k EXPR] against the refreshed baselines (a case
#                     with no baseline on this GPU is skipped without running)
#                     (these three take the scope in $SCOPE, push, nightly or weekly: default every case)
#   push [R [C [missing]]]  the push scope as a user runs it: perfsuite baselines refresh --scope push (2
#                     repeats, stopping itself at R seconds, default 330; with `missing`, only the cases with no
#                     baseline on this GPU yet), then pytest -m gpu --perfsuite-scope push --benchmark-compare
#                     (stopped at C seconds, default 170)
#   layout [B [N]]    the forkserver-layout A/A (benchmarks/gpu/layout.py): B forkservers x N runs of
#                     bert-base-uncased vanilla and fp16
#   noise             bert-base-uncased vanilla and fp16, five back-to-back runs each
#   ab [PAIRS [MAX]]  an A/A perfsuite ab of bert-base-uncased vanilla, fp16 and grad_ckpt (or $AB_STRATEGIES)
#   inject [PAIRS [MAX]]  perfsuite ab of bert-base-uncased vanilla and grad_ckpt (or $AB_STRATEGIES) with a 5%
#                     slowdown injected into the candidate as a GPU kernel (benchmarks/ab/slow-python against
#                     control-python)
#   jobs K [aa|inject]  perfsuite ab on the host's CPU with K duet lanes (--jobs K), over the CPU quick set
#                     (tiny-bert's 10 cases): an A/A, then a 5% slowdown injected (or only the one named), each
#                     stopped at $AB_LIMIT_S seconds (default 270); their table in $OUT/ab-jobs-K/table.md
#   nvml-preload [C]  the push scope's compare (stopped at C seconds, default 240) twice: as it is, then with
#                     PERFSUITE_PRELOAD_NVML=1; then benchmarks/gpu/preload_diff.py of the two
#   cuda-imports      what each module a GPU forkserver leaves to its workers asks of CUDA at import, with
#                     torch's NVML-based check and with its default (benchmarks/gpu/cuda_imports.py)
#   xlmr [SEQ]        the XLM-R base/large table of "Training large model with your GPU": vanilla, fp16, fp16+grad_ckpt at batch 8, SEQ tokens
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to a folder for the logs, JSON and baselines.tgz}"
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR="$PWD/.gpu-ext"
stage=${1:?usage: run.sh STAGE [ARGS...]; the stages are listed at the top of this file}
shift

timed() {  # timed NAME CMD...: the command, then its wall time; the command's exit status
    local name=$1 start=$SECONDS status
    shift
    "$@"
    status=$?
    echo "$name: $((SECONDS - start)) s wall"
    return "$status"
}
scope=()  # refresh, missing and compare: --scope / --perfsuite-scope from $SCOPE
[ -n "${SCOPE:-}" ] && scope=("--scope=$SCOPE")
rc=0  # the stage's exit status: its last failing command's (a pipe's, under pipefail)

keep_baselines() {
    tar czf "$OUT/baselines.tgz" --exclude baselines/cpu baselines
}

push_compare() {  # push_compare NAME C: the push scope's compare, stopped (SIGINT: what it compared is kept) at C s
    timed "$1" timeout -s INT "$2" python3 -m pytest -m gpu --perfsuite-scope push -p no:cacheprovider \
        tests/test_matrix.py -rs --perfsuite-missing=skip --benchmark-compare --perfsuite-json "$OUT/$1.json" 2>&1 |
        tee "$OUT/$1.log" || rc=$?
}

case "$stage" in
    smoke)
        timed smoke perfsuite run --device cuda --json "$OUT/smoke.json" 2>&1 | tee "$OUT/smoke.log" || rc=$?
        ;;
    claims)
        python3 -m pytest -m gpu -p no:cacheprovider -q tests/test_strategy_claims.py 2>&1 |
            tee "$OUT/claims.log" || rc=$?
        ;;
    refresh)
        # Appends: a job may refresh in several small batches, each written when it ends.
        expr=${1:?usage: run.sh refresh EXPR [N]}
        limit=()
        [ -n "${REFRESH_LIMIT_S:-}" ] && limit=(--time-limit "$REFRESH_LIMIT_S")
        timed refresh perfsuite baselines refresh --device cuda -k "$expr" "${scope[@]}" "${limit[@]}" \
            --repeats "${2:-3}" -- -p no:cacheprovider 2>&1 | tee -a "$OUT/refresh.log" || rc=$?
        keep_baselines
        ;;
    missing)
        # Stops itself inside S seconds with every finished case written; a killed refresh writes nothing.
        limit=${1:?usage: run.sh missing S [EXPR [N]]}
        timed missing perfsuite baselines refresh --device cuda --missing --time-limit "$limit" -k "${2:-}" \
            "${scope[@]}" --repeats "${3:-2}" -- -p no:cacheprovider 2>&1 | tee -a "$OUT/refresh.log" || rc=$?
        keep_baselines
        ;;
    compare)
        expr=${1:-}  # empty: every case (with SCOPE, every case of the scope)
        # At $COMPARE_LIMIT_S seconds (default 540) SIGINT ends it: pytest still prints what it compared.
        timed compare timeout -s INT "${COMPARE_LIMIT_S:-540}" python3 -m pytest -m gpu -p no:cacheprovider \
            tests/test_matrix.py -k "$expr" -rs "${scope[@]/#--scope/--perfsuite-scope}" \
            --perfsuite-missing=skip --benchmark-compare --perfsuite-json "$OUT/compare.json" 2>&1 |
            tee "$OUT/compare.log" || rc=$?
        ;;
    push)
        only=()
        [ "${3:-}" = missing ] && only=(--missing)
        timed push-refresh perfsuite baselines refresh --device cuda --scope push --repeats 2 "${only[@]}" \
            --time-limit "${1:-330}" -- -p no:cacheprovider --perfsuite-json "$OUT/push-refresh.json" 2>&1 |
            tee "$OUT/push-refresh.log" || rc=$?
        keep_baselines
        # A refused case makes the refresh exit 1; the compare runs anyway, skipping cases with no baseline.
        push_compare push-compare "${2:-170}"
        ;;
    layout)
        timed layout python3 benchmarks/gpu/layout.py --blocks "${1:-4}" --runs "${2:-2}" --json "$OUT/layout.json" \
            2>&1 | tee "$OUT/layout.log" || rc=$?
        ;;
    noise)
        runs=$(mktemp -d)
        for i in 1 2 3 4 5; do
            perfsuite run --device cuda --models bert-base-uncased --strategies vanilla,fp16 --no-profile \
                --json "$runs/run-$i.json" 2>&1 | grep -E "ms/step|cases:"
            tar czf "$OUT/noise.tgz" -C "$runs" .  # after every run: a job cut at its time limit keeps the runs so far
        done | tee "$OUT/noise.log" || rc=$?
        ;;
    ab)
        # At $AB_LIMIT_S seconds (default 270) SIGTERM ends it: the verdicts so far are still written.
        timed ab timeout -s TERM "${AB_LIMIT_S:-270}" perfsuite ab --base current --candidate current --device cuda \
            --models bert-base-uncased --strategies "${AB_STRATEGIES:-vanilla,fp16,grad_ckpt}" --pairs "${1:-10}" \
            --max-pairs "${2:-30}" --json "$OUT/ab.json" 2>&1 | tee "$OUT/ab.log" || rc=$?
        ;;
    inject)
        # What the A/A's spread predicts, measured: at $AB_LIMIT_S seconds (default 270) SIGTERM ends it. The
        # slowdown is a GPU kernel the host waits for, which a slower case's explanation can name in its GPU table.
        export PERFSUITE_SLOWDOWN=0.05 PERFSUITE_SLOWDOWN_KERNEL=1
        timed inject timeout -s TERM "${AB_LIMIT_S:-270}" perfsuite ab --base benchmarks/ab/control-python \
            --candidate benchmarks/ab/slow-python --device cuda --models bert-base-uncased \
            --strategies "${AB_STRATEGIES:-vanilla,grad_ckpt}" --pairs "${1:-8}" --max-pairs "${2:-30}" \
            --json "$OUT/inject.json" 2>&1 | tee "$OUT/inject.log" || rc=$?
        ;;
    jobs)
        # The same limit for each K: K lanes buy more cases decided and more pairs in it; at what spread, the table says.
        jobs=${1:?usage: run.sh jobs K [aa|inject]}
        case "${2:-}" in "" | aa | inject) ;; *) echo "usage: run.sh jobs K [aa|inject]" >&2 && exit 2 ;; esac
        dir="$OUT/ab-jobs-$jobs"
        mkdir -p "$dir"
        lanes() {  # lanes NAME BASE CANDIDATE
            timed "jobs-$jobs-$1" timeout -s TERM "${AB_LIMIT_S:-270}" perfsuite ab --base "$2" --candidate "$3" \
                --device cpu --jobs "$jobs" --json "$dir/$1.json" 2>&1 | tee "$dir/$1.log" || rc=$?
        }
        [ "${2:-aa}" = aa ] && lanes aa-1 current current
        [ "${2:-inject}" = inject ] &&
            PERFSUITE_SLOWDOWN=0.05 lanes uniform-5 benchmarks/ab/control-python benchmarks/ab/slow-python
        python3 benchmarks/ab/table.py "$dir" 2>&1 | tee "$dir/table.md"
        ;;
    nvml-preload)
        # The push scope's compare with the forkserver's preloads as they are, then with the modules that ask CUDA
        # about the GPUs tried there too (PERFSUITE_PRELOAD_NVML=1); then each case's build, start, losses and peak.
        # Alike but for that: the modules read from disk once before either, each compare with a FLOP cache of its own.
        python3 -c 'import contextlib, importlib
from perfsuite.core.preloads import CUDA_AT_IMPORT
for module in sorted(CUDA_AT_IMPORT):
    with contextlib.suppress(Exception):
        importlib.import_module(module)' > /dev/null 2>&1
        PERFSUITE_CACHE=$(mktemp -d) push_compare push-compare-default "${1:-240}"
        PERFSUITE_CACHE=$(mktemp -d) PERFSUITE_PRELOAD_NVML=1 push_compare push-compare-nvml "${1:-240}"
        python3 benchmarks/gpu/preload_diff.py "$OUT/push-compare-default.json" "$OUT/push-compare-nvml.json" 2>&1 |
            tee "$OUT/preload-diff.md" || rc=$?
        ;;
    cuda-imports)
        timed cuda-imports python3 benchmarks/gpu/cuda_imports.py --json "$OUT/cuda-imports-nvml.json" 2>&1 |
            tee "$OUT/cuda-imports.log" || rc=$?
        timed cuda-imports-default python3 benchmarks/gpu/cuda_imports.py --no-nvml-check \
            --json "$OUT/cuda-imports-default.json" 2>&1 |
            tee -a "$OUT/cuda-imports.log" || rc=$?
        ;;
    xlmr)
        # The columns of "Training large model with your GPU": batch 8 with fp16 off and on, large with fp16 and checkpointing; base fp16 at 16.
        seq=${1:-128}
        timed xlmr perfsuite run --device cuda --models xlm-roberta-base,xlm-roberta-large --seq-len "$seq" \
            --strategies vanilla,fp16,fp16+grad_ckpt --batch-size 8 --json "$OUT/xlmr-$seq.json" 2>&1 |
            tee "$OUT/xlmr-$seq.log" || rc=$?
        timed xlmr16 perfsuite run --device cuda --models xlm-roberta-base --strategies fp16 --batch-size 16 \
            --seq-len "$seq" --json "$OUT/xlmr16-$seq.json" 2>&1 | tee -a "$OUT/xlmr-$seq.log" || rc=$?
        ;;
    *)
        echo "unknown stage $stage" >&2
        exit 2
        ;;
esac
exit "$rc"
