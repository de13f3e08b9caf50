#!/usr/bin/env bash
# One call on a lent GPU machine: install, native build, the GPU test tier and the GPU benchmarks.
#
# The machine starts bare (torch+CUDA, PyG, Lightning, pyarrow; no ogb, jsonargparse or DALI), so
# prepare the small wheels here first and carry them:
#     pip download --no-deps -d .whl ogb jsonargparse typeshed-client docstring-parser outdated littleutils
# then run, from the repository root on the device machine (carry [".whl"]):
#     bash bench/gpu_session.sh
# Logs and JSON land in $OUT (default ./gpu-out); copy the JSON into bench/results/*_gpu.json.
# Steps are independent: one that fails is logged and the next still runs; the exit status counts them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export GNNKIT_HOME=${GNNKIT_HOME:-/tmp/gnnkit-home} PYTHONUNBUFFERED=1
failed=0

step() {  # step NAME COMMAND...: run, time and log one step
    local name=$1; shift
    local start=$SECONDS
    echo "== $name: $*"
    if "$@" >"$OUT/$name.log" 2>&1; then
        echo "   ok in $((SECONDS - start)) s"
    else
        echo "   FAILED (exit $?) in $((SECONDS - start)) s; tail of $OUT/$name.log:"
        tail -n 15 "$OUT/$name.log" | sed 's/^/   | /'
        failed=$((failed + 1))
    fi
}

step install python -m pip install --quiet --no-index --find-links .whl ogb jsonargparse
step install-gnnkit python -m pip install --quiet --no-deps --no-build-isolation -e .
step doctor python -m gnnkit.cli doctor
step build python -c "from gnnkit import native; assert native.get() is not None, native.status(); print(native.kernels())"
# The GPU tier: every test that runs on CUDA (the rest is CI's, on CPU).
step tests-gpu python -m pytest -q -x -p no:cacheprovider tests/gnnkit/native tests/gnnkit/sparse/test_adjacency.py \
    tests/gnnkit/sparse/test_spmm.py tests/gnnkit/tt tests/gnnkit/data/test_device_sampling.py tests/gnnkit/test_gpu_tier.py
step bench-native python bench/native.py --device cuda --json "$OUT/native_gpu.json"
step gcn-gnnkit python -m gnnkit.cli run recipes/gcn_synthetic_arxiv.yaml --model.aggregation gnnkit \
    --trainer.accelerator gpu --trainer.max_epochs 5
# Issue 16's table: every recipe family, gnnkit (GPU sampling) vs gnnkit with CPU sampling vs PyG.
step bench-gpu python bench/gpu.py --json "$OUT/gpu.json" --png "$OUT/gpu.png" --workdir /tmp/gpubench
echo "$failed step(s) failed; logs in $OUT"
exit "$failed"
