"""The CUDA kernels' arithmetic, checked without a GPU: every ``cuda/gpu/*.cu`` file is compiled as
C++ against a CPU stand-in for the CUDA runtime (``cuda_emu/cuda_runtime.h``: blocks in turn, a
block's threads as fibers that meet at real barriers) and run by ``cuda_emu/harness.cpp`` against
simple references (SpMM over CSR and SELL, a sampling hop, the fused TT lookup and its gradients).

This checks indexing, work splitting, shared-memory staging and atomics, not speed, and not
behaviour that needs lockstep warps; the kernels' own tests on a GPU (``test_cuda.py``) still run
where one is lent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gnnkit.native.loader import source_dir

EMULATOR = Path(__file__).with_name("cuda_emu")
CU_FILES = sorted((source_dir() / "gpu").glob("*.cu"))

#: ``kernel<<<grid, block[, shared[, stream]]>>>(`` -> ``gnnkit_emu::Launch(grid, block, ...)(kernel, ``
LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
#: ``extern __shared__ [__align__(n)] TYPE name[];`` -> a pointer to the launch's dynamic shared buffer
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([A-Za-z_][\w ]*?)\s+(\w+)\[\];")


def emulated_source(cu: Path) -> str:
    """A ``.cu`` file rewritten into C++ the emulator runs (launches and dynamic shared memory)."""
    text = LAUNCH.sub(lambda m: f"::gnnkit_emu::Launch({m.group(2)})({m.group(1)}, ", cu.read_text())
    return DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>"
                                        f"(::gnnkit_emu::dynamic_shared());", text)


def test_every_launch_and_dynamic_shared_array_is_rewritten():
    for cu in CU_FILES:
        text = emulated_source(cu)
        assert "<<<" not in text and "extern __shared__" not in text, cu.name
    assert emulated_source(source_dir() / "gpu" / "spmm.cu").count("::gnnkit_emu::Launch(") == 5


@pytest.fixture(scope="module")
def harness_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("needs g++ to build the emulated kernels")
    work = tmp_path_factory.mktemp("cuda_emu")
    sources = []
    for cu in CU_FILES:
        target = work / f"{cu.stem}_emulated.cpp"
        target.write_text(emulated_source(cu))
        sources.append(str(target))
    binary = work / "harness"
    # -I gpu/ finds kernels.h and, through "../rng.h", the shared random stream; a grid of at most
    # 2 feature tiles makes the SpMM kernels loop over the further ones
    cmd = [compiler, "-std=c++20", "-O1", "-DGNNKIT_MAX_GRID_Y=2", "-I", str(EMULATOR),
           "-I", str(source_dir() / "gpu"), str(EMULATOR / "harness.cpp"), *sources, "-o", str(binary)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"{' '.join(cmd)}\n{built.stderr[-4000:]}"
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=600)
    assert "failure(s)" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]
    return ran.stdout


def _checks(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.split(" ", 1)[-1].startswith(prefix)]


@pytest.mark.parametrize("kernel", ["spmm_csr", "spmm_sell", "sample_hop", "tt"])
def test_emulated_cuda_kernel_matches_its_reference(harness_output: str, kernel: str):
    lines = _checks(harness_output, kernel)
    assert lines, f"the harness ran no {kernel} check:\n{harness_output}"
    failed = [line for line in lines if line.startswith("FAIL")]
    assert not failed, "\n".join(failed)
