#!/usr/bin/env bash
# The GPU work of issues 16 and 17 on a lent GPU machine: install, native build, the GPU test tier
# and the GPU benchmarks, in named steps so that a session can spread them over calls of at most
# ten minutes (the machine keeps the build between calls while it stays warm).
#
# The machine starts bare (torch+CUDA, PyG, Lightning, pyarrow; no ogb, jsonargparse or DALI), so
# fetch the small wheels here first (Python 3.12 there) and carry them:
#     echo /.whl/ >> .git/info/exclude
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_17_x86_64 --platform any -d .whl \
#         ogb jsonargparse typeshed-client docstring-parser outdated littleutils
# then, from the repository root on the device machine (carry [".whl"]):
#     bash bench/gpu_session.sh                      # every step (longer than one call)
#     bash bench/gpu_session.sh setup tests          # call 1
#     bash bench/gpu_session.sh setup native formats # call 2 (setup is quick once built)
#     bash bench/gpu_session.sh setup gpu            # call 3
# Steps: setup (wheels, build), tests (the GPU tier), native (bench/native.py --device cuda),
# formats (label the corpus on the GPU, train the CUDA selector, bench/formats.py --device cuda),
# gpu (issue 16's table, bench/gpu.py; GNNKIT_GPU_FAMILIES="sage" etc. runs some families).
# Results land in $OUT (default ./gpu-out; at most 8 files come back), written as they are made,
# so a call cut short at its limit still brings back what it finished: the JSON files to copy into
# bench/results/ (formats_labels_gpu.jsonl too, and selector_model_cuda.json into gnnkit/sparse/),
# session.log with every step's outcome, logs.tgz with each finished step's whole log and the PNG
# plots, and step.log, the log of a step that was cut short.
# Work spans calls (each call starts a fresh machine): labelling goes on from a
# bench/results/formats_labels_gpu.jsonl brought back earlier, and bench/gpu.py resumes an
# unfinished bench/results/gpu.json (its rows are kept, the missing ones run).
# A step that fails is logged and the next still runs; the exit status counts the failures.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
LOGS=/tmp/gnnkit-gpu-logs
LABELS=$OUT/formats_labels_gpu.jsonl  # appended to as it is labelled
mkdir -p "$OUT" "$LOGS"
if [ ! -f "$LABELS" ] && [ -f bench/results/formats_labels_gpu.jsonl ]; then
    cp bench/results/formats_labels_gpu.jsonl "$LABELS"  # label on from where an earlier call stopped
fi
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

formats() {  # issue 17: the CUDA selector's corpus, its model, and the held-out comparison
    step label-gpu python3 bench/formats_corpus.py label --device cuda --count "$CORPUS" --labels "$LABELS"
    step train-gpu python3 bench/formats_corpus.py train --device cuda --labels "$LABELS" \
        --out "$OUT/selector_model_cuda.json"
    step bench-formats env GNNKIT_SELECTOR_CUDA="$OUT/selector_model_cuda.json" python3 bench/formats.py \
        --device cuda --json "$OUT/formats_gpu.json" --png "$LOGS/formats_gpu.png"
}

gpu() {  # issue 16's table: every recipe family, gnnkit (GPU sampling) vs CPU sampling vs PyG
    local resume=()
    if python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["complete"])' bench/results/gpu.json \
        2>/dev/null; then
        resume=(--resume bench/results/gpu.json)  # an earlier call's unfinished table: its rows are kept
    fi
    step gcn-gnnkit python3 -m gnnkit.cli run recipes/gcn_synthetic_arxiv.yaml --model.aggregation gnnkit \
        --trainer.accelerator gpu --trainer.max_epochs 5
    # shellcheck disable=SC2086  # the families are words
    step bench-gpu python3 bench/gpu.py --json "$OUT/gpu.json" --png "$LOGS/gpu.png" --workdir /tmp/gpubench \
        --families ${GNNKIT_GPU_FAMILIES:-sage gcn reuse} "${resume[@]}"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(setup tests native formats gpu)
for s in "${steps[@]}"; do
    case "$s" in
        setup|tests|native|formats|gpu) "$s" ;;
        *) echo "unknown step '$s' (setup, tests, native, formats, gpu)"; exit 2 ;;
    esac
done
exit "$failed"
