#!/usr/bin/env bash
# The CPU test suite under the GPU image's stack, on a machine without a GPU: torch 2.11.0 (PyPI's
# build of it is the CUDA 13.0 one the GPU image has), PyG 2.8 and Lightning 2.6.6, with the native
# build's CUDA part compiled and linked against that torch (GNNKIT_NATIVE_CUDA=1, for sm_80 and
# sm_90; needs nvcc 13 under CUDA_HOME, default /usr/local/cuda). The GPU tier still skips; what
# fails here would fail on a lent GPU too, where it costs device minutes. Run it before a GPU session.
#
#     bash bench/gpu_image_stack.sh [pytest arguments]     (default: -q tests)
#
# First run: a virtualenv of about 5 GB in .venv-gpu-image/ (GNNKIT_STACK_VENV overrides; kept for
# the next run), then the native build (about a minute on 2 cores) into
# $GNNKIT_HOME/native-gpu-image/, then pytest (about 11 minutes on 2 cores for the whole suite).
# On 2026-11-28 it found what torch 2.13 does not show: torch 2.11's one-off notice that sparse
# invariant checks are "implicitly disabled" (a test failed), ogb's version-check warning after
# every run and torch's "No CUDA runtime is found" line.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${GNNKIT_STACK_VENV:-.venv-gpu-image}
read -r -a STACK <<< "${GNNKIT_STACK:-torch==2.11.0 torch-geometric==2.8.* lightning==2.6.6}"  # no globbing
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "gpu_image_stack: no nvcc at $CUDA_HOME/bin/nvcc (set CUDA_HOME to a CUDA 13 toolkit)" >&2
    exit 2
fi
export GNNKIT_NATIVE_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-8.0;9.0}
export GNNKIT_NATIVE_CACHE=${GNNKIT_NATIVE_CACHE:-${GNNKIT_HOME:-$HOME/.gnnkit}/native-gpu-image}

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
"$VENV/bin/python" -m pip install --quiet "${STACK[@]}"
"$VENV/bin/python" -m pip install --quiet -e ".[test]"
"$VENV/bin/python" - <<'EOF'
import torch, torch_geometric, lightning
from gnnkit.native import loader
kernels = loader.kernels()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), PyG {torch_geometric.__version__}, "
      f"Lightning {lightning.__version__}; native build {loader.build_dir()}: {', '.join(kernels) or 'none'}")
missing = {"spmm_csr_cuda", "spmm_sell_cuda", "sample_neighbors_cuda", "tt_lookup_cuda"} - set(kernels)
if missing:
    raise SystemExit(f"gpu_image_stack: the native build has no CUDA part ({sorted(missing)} missing): {loader.status()['error']}")
EOF
if [ $# -eq 0 ]; then set -- -q tests; fi
exec "$VENV/bin/python" -m pytest "$@"
