#!/usr/bin/env bash
# The GPU work of issues 16 and 17 on a lent GPU machine: install, native build, the GPU test tier
# and the GPU benchmarks, in named steps sized for today's loan: 15 device-minutes a session (the
# machine's start, 1-2 min, included) and at most 10 minutes a call.
#
# The machine starts bare (torch+CUDA, PyG, Lightning, pyarrow, pytest-xdist; no ogb, jsonargparse
# or DALI), so fetch the small wheels here first (Python 3.12 there) and carry them:
#     echo /.whl/ >> .git/info/exclude
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
#         ogb jsonargparse typeshed-client docstring-parser outdated littleutils pymetis
# (pymetis: the TT recipe orders its rows by METIS partitions). Before the loan, on this machine:
#     bash bench/gpu_image_stack.sh      (the CPU suite under the image's torch 2.11+cu130, no device time)
# then, from the repository root on the device machine (carry [".whl"]):
#     GNNKIT_CALL_S=580 bash bench/gpu_session.sh setup tests gpu   # the steps named, in order
# GNNKIT_CALL_S is the call's timeout_s: each step runs under what is left of it (less 15 s), so a
# step that would overrun is stopped and its log still comes back.
#
# Steps (each call begins with setup: on a fresh machine about 25 s, on a warm one seconds; the
# times below marked "H200" were measured there on 2026-11-27, the others are estimates):
#   setup         wheels, the imports the steps need, the native build; and, in the background, the
#                 datasets that the call's gpu/e2e steps train on (the arxiv and products twins:
#                 149 s on the H200 beside the tests), overlapping the build and the tests
#   tests         the GPU tier, `pytest -n 16 -m gpu tests`: every test that needs CUDA (issue 16's
#                 acceptance, with the CUDA kernel tests of issue 17); then the native kernels' CPU
#                 tests on this image's torch (issue 16, item 3). H200: 105 s and 57 s on 16 workers
#   native        bench/native.py --device cuda -> native_gpu.json (~1-2 min)
#   label         label the corpus on the GPU (GNNKIT_GPU_CORPUS matrices, default 150; ~2-4 min; resumes)
#   train         train the CUDA selector on those labels -> selector_model_cuda.json
#   formats       bench/formats.py --device cuda, held-out matrices -> formats_gpu.json (~1-2 min)
#   e2e           its end-to-end part, added to formats_gpu.json (~3-5 min)
#   gpu           issue 16's table, bench/gpu.py -> gpu.json; GNNKIT_GPU_FAMILIES="gcn sage" runs some
#                 families, and an unfinished gpu.json is resumed (its rows kept). H200: gcn and
#                 three sage rows about 250 s (the CPU-sampling rows take 60 s each), reuse 123 s
#
# A plan for one session (15 device-minutes): one issue a session, two calls on one machine. The
# machine stays warm 30 s after a call, so make the second call at once: it finds the first's
# build, datasets and results there (GNNKIT_HOME is the ignored folder .gpu-home/, which survives
# between calls on a warm machine; results are also kept in .gpu-home/results and picked up from
# there before the tree's copies). Copy what came back into the tree afterwards (gpu.json,
# formats_gpu.json and formats_labels_gpu.jsonl into bench/results/, selector_model_cuda.json into
# gnnkit/sparse/); a cold machine resumes from those copies instead.
#   issue 16: GNNKIT_GPU_FAMILIES="gcn sage" bash bench/gpu_session.sh setup tests gpu    (H200: 7.1 min)
#             bash bench/gpu_session.sh setup gpu  (all families: the first call's rows are kept and
#                                                   only the missing ones run; H200: 2.1 min for reuse)
#   issue 17: bash bench/gpu_session.sh setup tests native label                         (~8 min)
#             bash bench/gpu_session.sh setup train formats e2e                           (~5 min)
# Issue 16's two calls took 457 s and 197 s of device time (start and transfers included) on
# 2026-11-27, with three sage rows. On 2026-11-28 one cold call of `setup tests gpu` (every family,
# GNNKIT_CALL_S=588) took 603 s of device time: setup 32 s, tests 105 + 57 s, then 378 s of the
# table, which finished every row but the last (reuse's fresh sampling); a call at once on the warm
# machine (`setup gpu`) ran that row in 75 s (82 s of device time). Issue 17's
# minutes are estimates from CPU runs: GNNKIT_CALL_S keeps a call inside its limit whatever they
# turn out to be, and an unfinished table or corpus resumes next time. Set GNNKIT_CALL_S (and the
# call's timeout_s) from device status's budget_left_s less the start (about 30 s on a warm machine,
# 90 s on a cold one): a call the device tool kills at its own limit loses the step under way, where
# the script's deadline stops it and keeps its log. Run the tier through this
# script (or with GNNKIT_NATIVE_CACHE=$GNNKIT_HOME/native): without it every test worker builds the
# native kernels again, and a 95 s tier run did not get past its first test.
#
# Results land in $OUT (default ./gpu-out; at most 8 files come back), written as they are made,
# so a call cut short at its limit still brings back what it finished: the JSON files above,
# session.log with every step's outcome, logs.tgz with each finished step's whole log and the PNG
# plots, and step.log, the log of a step that was cut short.
# A step that fails is logged and the next still runs (but a failed install, import or native build
# skips the benchmarks, whose numbers would be the pure-PyTorch fallback's); the exit status counts
# the failures.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
LOGS=/tmp/gnnkit-gpu-logs
export GNNKIT_HOME=${GNNKIT_HOME:-$PWD/.gpu-home} PYTHONUNBUFFERED=1
export OUTDATED_IGNORE=1  # ogb's version check (a thread asking PyPI): there is no network there
export GNNKIT_NATIVE_CACHE=${GNNKIT_NATIVE_CACHE:-$GNNKIT_HOME/native}  # the tests' own homes load setup's build
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
KEPT=$GNNKIT_HOME/results  # this machine's results, for the next call on it
LABELS=$OUT/formats_labels_gpu.jsonl  # appended to as it is labelled
CORPUS=${GNNKIT_GPU_CORPUS:-150}  # matrices labelled on the GPU for the CUDA selector
deadline=$((SECONDS + ${GNNKIT_CALL_S:-580} - 15))
mkdir -p "$OUT" "$LOGS" "$KEPT"
failed=0
broken=""  # the setup step that failed, if one did: the benchmarks are then skipped

seed() {  # seed FILE...: bring an earlier call's result to $OUT: this machine's, else the tree's copy
    for file in "$@"; do
        local name
        name=$(basename "$file")
        [ -f "$OUT/$name" ] && continue
        if [ -f "$KEPT/$name" ]; then cp "$KEPT/$name" "$OUT/"; elif [ -f "$file" ]; then cp "$file" "$OUT/"; fi
    done
}
seed bench/results/formats_labels_gpu.jsonl  # labelling goes on from where an earlier call stopped

finish() {
    echo "$failed step(s) failed; session.log and logs.tgz in $OUT" | tee -a "$OUT/session.log"
}
trap finish EXIT

record() {  # record NAME LOG STATUS START: a finished step's outcome in session.log, its log into logs.tgz
    local name=$1 log=$2 status=$3 start=$4
    if [ "$status" -eq 0 ]; then
        echo "   ok in $((SECONDS - start)) s" | tee -a "$OUT/session.log"
    else
        local why="exit $status"
        [ "$status" -eq 124 ] && why="stopped at the call's limit"
        echo "   FAILED ($why) in $((SECONDS - start)) s; tail of $name.log:" | tee -a "$OUT/session.log"
        tail -n 15 "$log" | sed 's/^/   | /' | tee -a "$OUT/session.log"
        failed=$((failed + 1))
    fi
    tail -n 3 "$log" | sed 's/^/   > /' >>"$OUT/session.log"
    [ "$log" = "$LOGS/$name.log" ] || mv "$log" "$LOGS/$name.log"
    tar -czf "$OUT/logs.tgz" -C "$LOGS" .
    cp "$OUT"/*.json "$OUT"/*.jsonl "$KEPT/" 2>/dev/null
}

step() {  # step NAME COMMAND...: run, time and log one step (live in $OUT/step.log), within the call's limit
    local name=$1; shift
    local start=$SECONDS live=$OUT/step.log left=$((deadline - SECONDS))
    echo "== $name: $*" | tee -a "$OUT/session.log"
    if [ "$left" -lt 20 ]; then
        echo "   SKIPPED: ${left} s left of the call" | tee -a "$OUT/session.log"
        failed=$((failed + 1))
        return
    fi
    timeout -k 10 "$left" "$@" >"$live" 2>&1
    local status=$?
    record "$name" "$live" "$status" "$start"
    return "$status"
}

bench() {  # bench NAME COMMAND...: a benchmark step, skipped when the setup failed
    if [ -n "$broken" ]; then
        echo "== $1: SKIPPED (setup step '$broken' failed: the numbers would not be gnnkit's)" \
            | tee -a "$OUT/session.log"
        failed=$((failed + 1))
        return
    fi
    step "$@"
}

prep_pid=""
prep_start() {  # DATASET...: preprocess into the cache in the background (the runs then find it there)
    [ $# -gt 0 ] || return 0
    echo "== prep (background): $*" | tee -a "$OUT/session.log"
    prep_begun=$SECONDS
    (for dataset in "$@"; do  # within the call's limit too: a step waiting for it must not outlive it
        left=$((deadline - SECONDS)); [ "$left" -ge 1 ] || exit 124
        timeout -k 5 "$left" python3 -m gnnkit.cli preprocess "$dataset" || exit
    done) >"$LOGS/prep.log" 2>&1 &
    prep_pid=$!
}

prep_wait() {  # the background preprocessing's outcome, once (steps that train wait for it)
    [ -n "$prep_pid" ] || return 0
    local status=0
    wait "$prep_pid" || status=$?
    prep_pid=""
    echo "== prep: done waiting" | tee -a "$OUT/session.log"
    record prep "$LOGS/prep.log" "$status" "$prep_begun"
}

datasets_for() {  # STEP...: the datasets those steps train on
    local want=()
    for s in "$@"; do
        case "$s" in
            gpu) for family in ${GNNKIT_GPU_FAMILIES:-sage gcn reuse}; do
                     case "$family" in sage|reuse) want+=(synthetic-products) ;; gcn) want+=(synthetic-arxiv) ;; esac
                 done ;;
            e2e) want+=(synthetic-arxiv) ;;
        esac
    done
    [ ${#want[@]} -eq 0 ] || printf '%s\n' "${want[@]}" | awk '!seen[$0]++'
}

setup() {
    if [ -d .whl ]; then
        step install python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || broken=install
    fi
    # shellcheck disable=SC2046  # one dataset a word
    [ -n "$prep_pid" ] || prep_start $(datasets_for "${steps[@]}")
    step doctor python3 -m gnnkit.cli doctor
    step imports python3 -c "import ogb, jsonargparse, pymetis, pandas, sklearn, pyarrow, matplotlib; print('ok')" \
        || broken=${broken:-imports}
    step build python3 -c "from gnnkit import native; assert native.get(), native.status(); print(native.kernels())" \
        || broken=${broken:-build}
}

tests() {  # the GPU tier (the rest is CI's, on CPU), on 16 pytest workers where pytest-xdist imports
    local workers=()
    python3 -c "import xdist" 2>/dev/null && workers=(-n "${GNNKIT_TEST_WORKERS:-16}")
    step tests-gpu python3 -m pytest -q -p no:cacheprovider --tb=short --durations=15 "${workers[@]}" -m gpu tests
    step tests-native python3 -m pytest -q -p no:cacheprovider "${workers[@]}" -m "not gpu" tests/gnnkit/native \
        -k "not emulated and not nvcc"  # CI runs the emulator and the nvcc compile checks
}

native() {
    bench bench-native python3 bench/native.py --device cuda --json "$OUT/native_gpu.json" --png "$LOGS/native_gpu.png"
}

label() {  # issue 17: the CUDA selector's corpus
    bench label-gpu python3 bench/formats_corpus.py label --device cuda --count "$CORPUS" --labels "$LABELS"
}

train() {  # its model
    bench train-gpu python3 bench/formats_corpus.py train --device cuda --labels "$LABELS" \
        --out "$OUT/selector_model_cuda.json"
}

selector=()
use_selector() {  # the CUDA model trained on this machine, if any (else the shipped one), for the next steps
    local model=$OUT/selector_model_cuda.json
    [ -f "$model" ] || [ ! -f "$KEPT/${model##*/}" ] || cp "$KEPT/${model##*/}" "$model"
    selector=(env)
    [ -f "$model" ] && selector=(env GNNKIT_SELECTOR_CUDA="$model")
}

formats() {  # the held-out comparison (not beside the background preprocessing: it times the GPU)
    use_selector
    prep_wait
    bench bench-formats "${selector[@]}" python3 bench/formats.py --device cuda --no-e2e \
        --json "$OUT/formats_gpu.json" --png "$LOGS/formats_gpu.png"
}

e2e() {  # its end-to-end part, added to the matrix part of this or an earlier call
    use_selector
    seed bench/results/formats_gpu.json
    prep_wait
    bench bench-formats-e2e "${selector[@]}" python3 bench/formats.py --device cuda --e2e-only --trials 2 \
        --json "$OUT/formats_gpu.json" --png "$LOGS/formats_gpu_e2e.png"
}

gpu() {  # issue 16's table: every recipe family, gnnkit (GPU sampling) vs CPU sampling vs PyG
    seed bench/results/gpu.json
    local resume=()
    if python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["complete"])' "$OUT/gpu.json" \
        2>/dev/null; then
        resume=(--resume "$OUT/gpu.json")  # an earlier call's unfinished table: its rows are kept
    else
        rm -f "$OUT/gpu.json"  # a finished one: this call makes a new table, and only that comes back
    fi
    prep_wait
    # shellcheck disable=SC2086  # the families are words
    bench bench-gpu python3 bench/gpu.py --json "$OUT/gpu.json" --png "$LOGS/gpu.png" --workdir /tmp/gpubench \
        --families ${GNNKIT_GPU_FAMILIES:-sage gcn reuse} "${resume[@]}"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(setup tests native label train formats e2e gpu)
for s in "${steps[@]}"; do
    case "$s" in
        setup|tests|native|label|train|formats|e2e|gpu) ;;
        *) echo "unknown step '$s' (setup, tests, native, label, train, formats, e2e, gpu)"; exit 2 ;;
    esac
done
for s in "${steps[@]}"; do "$s"; done
prep_wait
exit "$failed"
