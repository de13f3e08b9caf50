#!/usr/bin/env bash
# The GPU work of issues 16 and 17 on a lent GPU machine: install, native build, the GPU test tier
# and the GPU benchmarks, in named steps so that a session can spread them over calls of at most
# ten minutes.
#
# The machine starts bare (torch+CUDA, PyG, Lightning, pyarrow; no ogb, jsonargparse or DALI), so
# fetch the small wheels here first (Python 3.12 there) and carry them:
#     echo /.whl/ >> .git/info/exclude
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_17_x86_64 --platform any -d .whl \
#         ogb jsonargparse typeshed-client docstring-parser outdated littleutils
# then, from the repository root on the device machine (carry [".whl"]):
#     bash bench/gpu_session.sh setup tests          # one call: the steps named, in order
#     bash bench/gpu_session.sh                      # every step (far longer than one call)
# Steps (each call starts a fresh machine, so begin every call with setup, about 1-2 min):
#   setup    wheels, the imports the steps need, the native build
#   tests    the GPU test tier (issue 16's acceptance; ~6-9 min)
#   native   bench/native.py --device cuda -> native_gpu.json (~1-2 min)
#   label    label the corpus on the GPU (GNNKIT_GPU_CORPUS matrices, default 150; ~2-4 min; resumes)
#   train    train the CUDA selector on those labels -> selector_model_cuda.json
#   formats  bench/formats.py --device cuda, held-out matrices -> formats_gpu.json (~1-2 min)
#   e2e      its end-to-end part, added to formats_gpu.json (~5 min)
#   gpu      issue 16's table, bench/gpu.py -> gpu.json; GNNKIT_GPU_FAMILIES="gcn sage" runs some
#            families, and an unfinished bench/results/gpu.json is resumed (its rows kept)
# A plan that fits one session's 30 device-minutes, copying what comes back into the tree between
# calls (gpu.json, formats_gpu.json and formats_labels_gpu.jsonl into bench/results/,
# selector_model_cuda.json into gnnkit/sparse/), so that the next call goes on from there:
#   issue 16: `setup tests`; GNNKIT_GPU_FAMILIES="gcn sage" `setup gpu`; GNNKIT_GPU_FAMILIES=reuse `setup gpu`
#   issue 17: `setup native label`; `setup label train formats`; `setup e2e`
# Results land in $OUT (default ./gpu-out; at most 8 files come back), written as they are made,
# so a call cut short at its limit still brings back what it finished: the JSON files above,
# session.log with every step's outcome, logs.tgz with each finished step's whole log and the PNG
# plots, and step.log, the log of a step that was cut short.
# A step that fails is logged and the next still runs; the exit status counts the failures.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
LOGS=/tmp/gnnkit-gpu-logs
LABELS=$OUT/formats_labels_gpu.jsonl  # appended to as it is labelled
mkdir -p "$OUT" "$LOGS"
seed() {  # seed FILE...: bring what an earlier call brought back (copied into the tree) to $OUT
    for file in "$@"; do
        [ -f "$OUT/$(basename "$file")" ] || [ ! -f "$file" ] || cp "$file" "$OUT/"
    done
}
seed bench/results/formats_labels_gpu.jsonl  # labelling goes on from where an earlier call stopped
export GNNKIT_HOME=${GNNKIT_HOME:-/tmp/gnnkit-home} PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
CORPUS=${GNNKIT_GPU_CORPUS:-150}  # matrices labelled on the GPU for the CUDA selector
failed=0
finish() {
    echo "$failed step(s) failed; session.log and logs.tgz in $OUT" | tee -a "$OUT/session.log"
}
trap finish EXIT

step() {  # step NAME COMMAND...: run, time and log one step (live in $OUT/step.log, then logs.tgz)
    local name=$1; shift
    local start=$SECONDS live=$OUT/step.log
    echo "== $name: $*" | tee -a "$OUT/session.log"
    if "$@" >"$live" 2>&1; then
        echo "   ok in $((SECONDS - start)) s" | tee -a "$OUT/session.log"
    else
        echo "   FAILED (exit $?) in $((SECONDS - start)) s; tail of $name.log:" | tee -a "$OUT/session.log"
        tail -n 15 "$live" | sed 's/^/   | /' | tee -a "$OUT/session.log"
        failed=$((failed + 1))
    fi
    tail -n 3 "$live" | sed 's/^/   > /' >>"$OUT/session.log"
    mv "$live" "$LOGS/$name.log"
    tar -czf "$OUT/logs.tgz" -C "$LOGS" .
}

setup() {
    if [ -d .whl ]; then
        step install python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl
    fi
    step doctor python3 -m gnnkit.cli doctor
    step imports python3 -c "import ogb, jsonargparse, pandas, sklearn, pyarrow, matplotlib; print('imports ok')"
    step build python3 -c "from gnnkit import native; assert native.get() is not None, native.status(); print(native.kernels())"
}

tests() {  # the GPU tier: every test that runs on CUDA (the rest is CI's, on CPU)
    step tests-gpu python3 -m pytest -q -p no:cacheprovider tests/gnnkit/native tests/gnnkit/sparse \
        tests/gnnkit/tt tests/gnnkit/data/test_device_sampling.py tests/pipeline/test_shard_reader.py \
        tests/gnnkit/test_gpu_tier.py
}

native() {
    step bench-native python3 bench/native.py --device cuda --json "$OUT/native_gpu.json" --png "$LOGS/native_gpu.png"
}

label() {  # issue 17: the CUDA selector's corpus
    step label-gpu python3 bench/formats_corpus.py label --device cuda --count "$CORPUS" --labels "$LABELS"
}

train() {  # its model
    step train-gpu python3 bench/formats_corpus.py train --device cuda --labels "$LABELS" \
        --out "$OUT/selector_model_cuda.json"
}

with_selector() {  # COMMAND...: run it with the model trained in this call, if any (else the shipped one)
    if [ -f "$OUT/selector_model_cuda.json" ]; then
        GNNKIT_SELECTOR_CUDA="$OUT/selector_model_cuda.json" "$@"
    else
        "$@"
    fi
}

formats() {  # the held-out comparison
    step bench-formats with_selector python3 bench/formats.py --device cuda --no-e2e \
        --json "$OUT/formats_gpu.json" --png "$LOGS/formats_gpu.png"
}

e2e() {  # its end-to-end part, added to the matrix part of this or an earlier call
    seed bench/results/formats_gpu.json
    step bench-formats-e2e with_selector python3 bench/formats.py --device cuda --e2e-only --trials 2 \
        --json "$OUT/formats_gpu.json"
}

gpu() {  # issue 16's table: every recipe family, gnnkit (GPU sampling) vs CPU sampling vs PyG
    local resume=()
    if python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["complete"])' bench/results/gpu.json \
        2>/dev/null; then
        resume=(--resume bench/results/gpu.json)  # an earlier call's unfinished table: its rows are kept
    fi
    # shellcheck disable=SC2086  # the families are words
    step bench-gpu python3 bench/gpu.py --json "$OUT/gpu.json" --png "$LOGS/gpu.png" --workdir /tmp/gpubench \
        --families ${GNNKIT_GPU_FAMILIES:-sage gcn reuse} "${resume[@]}"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(setup tests native label train formats e2e gpu)
for s in "${steps[@]}"; do
    case "$s" in
        setup|tests|native|label|train|formats|e2e|gpu) "$s" ;;
        *) echo "unknown step '$s' (setup, tests, native, label, train, formats, e2e, gpu)"; exit 2 ;;
    esac
done
exit "$failed"
