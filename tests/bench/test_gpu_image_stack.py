"""bench/gpu_image_stack.sh, run here against a stand-in virtualenv ``python`` that records its
command lines and the build settings it was given (the real run downloads about 5 GB)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_image_stack.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stack(tmp_path: Path, *args: str, nvcc: bool = True) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the script with a stand-in venv and CUDA toolkit; (process, recorded calls)."""
    venv, toolkit, calls = tmp_path / "venv", tmp_path / "cuda", tmp_path / "calls.txt"
    (venv / "bin").mkdir(parents=True)
    (toolkit / "bin").mkdir(parents=True)
    if nvcc:
        (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
        (toolkit / "bin" / "nvcc").chmod(0o755)
    python = venv / "bin" / "python"
    python.write_text(f'#!/usr/bin/env bash\n[ "$1" = - ] && cat > /dev/null\n'
                      f'echo "$* | $GNNKIT_NATIVE_CUDA $TORCH_CUDA_ARCH_LIST" >> {calls}\n')
    python.chmod(0o755)
    env = {**os.environ, "GNNKIT_STACK_VENV": str(venv), "CUDA_HOME": str(toolkit), "GNNKIT_HOME": str(tmp_path)}
    for name in ("GNNKIT_NATIVE_CUDA", "TORCH_CUDA_ARCH_LIST", "GNNKIT_NATIVE_CACHE", "GNNKIT_STACK"):
        env.pop(name, None)
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    return proc, calls.read_text().splitlines() if calls.exists() else []


def test_the_stack_is_installed_the_cuda_part_built_and_the_suite_run(tmp_path):
    proc, calls = _stack(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert calls[0].startswith("-m pip install --quiet torch==2.11.0 torch-geometric==2.8.* lightning==2.6.6 |")
    assert calls[1].startswith("-m pip install --quiet -e .[test] |")
    assert calls[2] == "- | 1 8.0;9.0"  # the build check, with the CUDA part for sm_80 and sm_90
    assert calls[3] == "-m pytest -q tests | 1 8.0;9.0"


def test_pytest_arguments_pass_through(tmp_path):
    proc, calls = _stack(tmp_path, "-x", "tests/gnnkit/native")
    assert proc.returncode == 0, proc.stderr
    assert calls[-1].startswith("-m pytest -x tests/gnnkit/native |")


def test_without_nvcc_it_stops_in_one_line_before_installing(tmp_path):
    proc, calls = _stack(tmp_path, nvcc=False)
    assert proc.returncode == 2 and calls == []
    assert proc.stderr.strip() == f"gpu_image_stack: no nvcc at {tmp_path}/cuda/bin/nvcc (set CUDA_HOME to a CUDA 13 toolkit)"
