"""The native loader: cached builds, the fallback, switching off, and ``gnnkit doctor``."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest
import torch

from gnnkit import native
from gnnkit.cli import main
from gnnkit.doctor import report
from gnnkit.native import loader


def test_build_lives_in_the_per_user_cache_and_is_reused_by_a_new_process(ext):
    folder = loader.build_dir()
    library = Path(ext.__file__)
    assert library.parent == folder and folder.name == loader.build_key()
    before = library.stat().st_mtime_ns
    code = "from gnnkit import native; import sys; sys.exit(0 if native.available() else 1)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[3])
    assert result.returncode == 0, result.stderr[-2000:]
    assert library.stat().st_mtime_ns == before  # loaded, not rebuilt


def test_build_key_follows_the_sources(tmp_path, monkeypatch):
    copy = tmp_path / "cuda"
    shutil.copytree(loader.source_dir(), copy)
    monkeypatch.setenv("GNNKIT_NATIVE_SRC", str(copy))
    key = loader.build_key(cuda=False)
    assert loader.build_key(cuda=False) == key
    (copy / "cpu" / "spmm.cpp").write_text((copy / "cpu" / "spmm.cpp").read_text() + "\n// changed\n")
    assert loader.build_key(cuda=False) != key
    assert loader.build_key(cuda=True) != loader.build_key(cuda=False)
    twin = tmp_path / "worktree" / "cuda"  # the same sources in another checkout: its own build
    shutil.copytree(copy, twin)
    monkeypatch.setenv("GNNKIT_NATIVE_SRC", str(twin))
    assert loader.build_key(cuda=False) != key


def test_a_cuda_build_key_names_the_gpu_architectures(monkeypatch):
    """A CUDA build for other GPUs (another TORCH_CUDA_ARCH_LIST, or the GPUs seen when it was built)
    lacks kernel images for these and would fail at its first launch: it gets a key of its own. The
    CPU build's key does not depend on them."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    sm80, cpu = loader.build_key(cuda=True), loader.build_key(cuda=False)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert loader.cuda_archs() == "8.0;9.0"
    assert loader.build_key(cuda=True) != sm80 and loader.build_key(cuda=False) == cpu
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0) if i else (8, 0))
    assert loader.cuda_archs() == "8.0;9.0"  # what torch's builder compiles for without the list


def test_a_build_is_announced_with_its_folder_and_time_and_a_built_library_is_reused(tmp_path, monkeypatch, capsys):
    from torch.utils import cpp_extension

    copy = tmp_path / "cuda"
    shutil.copytree(loader.source_dir(), copy)
    monkeypatch.setenv("GNNKIT_NATIVE_SRC", str(copy))
    monkeypatch.setenv("GNNKIT_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(logging.getLogger("gnnkit"), "handlers", [])  # no log set up: stderr
    monkeypatch.setattr(loader, "_by_key", {})
    monkeypatch.setattr(loader, "with_cuda", lambda: False)  # a CPU build, also on a GPU machine
    builds = []

    def compile_(name, build_directory, **_):  # stands in for the minute of compiling
        builds.append(name)
        Path(build_directory, f"{name}.so").write_bytes(b"")
        return types.SimpleNamespace(kernels=lambda: [])

    monkeypatch.setattr(cpp_extension, "load", compile_)
    loader._build(verbose=False)
    err = capsys.readouterr().err.splitlines()
    folder = loader.build_dir(cuda=False)
    assert err[0] == f"[gnnkit] building native kernels (about a minute on 2 cores, once) into {folder}"
    assert re.fullmatch(r"\[gnnkit\] native kernels built in \d+s", err[1]) and len(err) == 2
    assert loader.library_path(folder, loader.build_key(cuda=False)).is_file()
    loader._by_key.clear()  # as a new process: finds the library, loads it without a word
    loader._build(verbose=False)
    assert capsys.readouterr().err == "" and len(builds) == 2


def _pose_as_cuda_torch(monkeypatch: pytest.MonkeyPatch, home: Path | None, nvcc: bool, gpu: bool) -> None:
    """This torch as a CUDA 13 build with the CUDA toolkit at ``home`` (none: ``None``), which has an
    nvcc or not, and a GPU visible or not; ``GNNKIT_NATIVE_CUDA`` unset."""
    import torch
    from torch.utils import cpp_extension

    if home is not None:
        (home / "bin").mkdir()
        if nvcc:
            (home / "bin" / "nvcc").write_text("")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None if home is None else str(home))
    monkeypatch.delenv("GNNKIT_NATIVE_CUDA", raising=False)


@pytest.mark.parametrize("toolkit", ["none", "without nvcc", "with nvcc"])
def test_cuda_kernels_join_the_build_only_with_a_cuda_compiler(monkeypatch, tmp_path, toolkit):
    """A pip-installed CUDA torch on a GPU machine, or a CUDA runtime image (a /usr/local/cuda
    without bin/nvcc), has no compiler: the build then stays CPU-only (the CPU kernels are kept)
    instead of failing as a whole."""
    _pose_as_cuda_torch(monkeypatch, None if toolkit == "none" else tmp_path, nvcc=toolkit == "with nvcc", gpu=True)
    built = toolkit == "with nvcc"
    assert loader.with_cuda() is built
    assert any(p.suffix == ".cu" for p in loader.sources()) is built


@pytest.mark.parametrize(("mode", "gpu", "built"), [("auto", False, False), ("auto", True, True), ("1", False, True),
                                                    ("on", False, True), ("0", True, False)])
def test_gnnkit_native_cuda_builds_the_cuda_kernels_without_a_gpu_or_never(monkeypatch, tmp_path, mode, gpu, built):
    """GNNKIT_NATIVE_CUDA=1 builds the CUDA part where nvcc and a CUDA torch are but no GPU (a login
    node; TORCH_CUDA_ARCH_LIST names the GPUs), 0 never builds it; a bad value is one line."""
    _pose_as_cuda_torch(monkeypatch, tmp_path, nvcc=True, gpu=gpu)
    monkeypatch.setenv("GNNKIT_NATIVE_CUDA", mode)
    assert loader.with_cuda() is built
    assert any(p.suffix == ".cu" for p in loader.sources()) is built
    monkeypatch.setenv("GNNKIT_NATIVE_CUDA", "maybe")
    with pytest.raises(ValueError, match=r"GNNKIT_NATIVE_CUDA: expected auto, 1, on, true, yes \(on\) or "
                                         r"0, off, false, no \(off\), got 'maybe'"):
        loader.with_cuda()


def test_doctor_says_gnnkit_native_cuda_left_the_cuda_part_out_and_names_a_bad_value(monkeypatch, capsys):
    monkeypatch.setenv("GNNKIT_NATIVE_CUDA", "0")
    assert report(build=False)["native CUDA part"] == "no (GNNKIT_NATIVE_CUDA=0)"
    monkeypatch.setenv("GNNKIT_NATIVE_CUDA", "sometimes")
    assert main(["doctor", "--no-build"]) == 2
    assert capsys.readouterr().err == ("gnnkit: error: GNNKIT_NATIVE_CUDA: expected auto, 1, on, true, yes (on) or "
                                          "0, off, false, no (off), got 'sometimes'\n")


@pytest.mark.parametrize("importer", ["torch", "gnnkit"])
def test_a_cuda_torch_without_a_gpu_builds_without_torchs_no_runtime_line(tmp_path, importer):
    """A CUDA torch (the PyPI default) on a machine with a CUDA toolkit but no GPU logs "No CUDA
    runtime is found, using CUDA_HOME=..." when its extension builder is imported; gnnkit imports it
    without that line (in a fresh process posing as such a torch: the line comes once, at import)."""
    pose = ("import torch\n"
            "torch.version.cuda = '13.0'\n"
            "torch.cuda._is_compiled = lambda: True\n"
            "torch.cuda.is_available = lambda: False\n")
    use = ("from torch.utils import cpp_extension\n" if importer == "torch" else
           "from gnnkit.native import loader\nassert loader.cuda_compiler() is None and not loader.with_cuda()\n"
           "loader._cpp_extension()\n")
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", pose + use], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("No CUDA runtime is found" in result.stderr) is (importer == "torch"), result.stderr


def test_missing_sources_fall_back_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNKIT_NATIVE", "1")
    monkeypatch.setenv("GNNKIT_NATIVE_SRC", str(tmp_path / "nowhere"))
    monkeypatch.setenv("GNNKIT_NATIVE_CACHE", str(tmp_path / "cache"))
    loader.reset()
    try:
        with pytest.warns(RuntimeWarning, match="native kernels unavailable, using pure PyTorch") as caught:
            assert loader.get() is None
            assert not native.available() and native.kernels() == []
        assert len(caught) == 1 and "\n" not in str(caught[0].message)
        assert native.status()["error"].startswith("FileNotFoundError")
    finally:
        loader.reset()


def test_switched_off_by_environment_and_context(ext, monkeypatch):
    with native.disabled():
        assert not native.enabled() and native.get() is None
    assert native.get() is ext
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # switching off is silent
        assert native.get() is None and not native.available()
    assert native.status()["enabled"] is False


def test_build_lock_is_exclusive_and_clears_torch_leftovers(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    (tmp_path / "lock").touch()  # what a killed torch build leaves: torch would wait on it forever
    with loader.build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()
        with open(tmp_path / ".gnnkit-build.lock", "a+") as other:  # another process's attempt
            with pytest.raises(BlockingIOError):
                fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / ".gnnkit-build.lock", "a+") as other:  # released afterwards
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_killed_builder_does_not_block_the_next(tmp_path):
    """A process that dies holding the lock releases it (the OS drops flocks of dead processes)."""
    code = ("import os, sys; sys.path.insert(0, sys.argv[2]); from gnnkit.native import loader; from pathlib import Path\n"
            "with loader.build_lock(Path(sys.argv[1])): os._exit(9)")
    root = str(Path(__file__).resolve().parents[3])
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path), root], capture_output=True, text=True, timeout=120)
    assert result.returncode == 9, result.stderr[-2000:]
    start = time.monotonic()
    with loader.build_lock(tmp_path):
        assert time.monotonic() - start < 5


def test_doctor_reports_versions_threads_and_kernels(ext, capsys):
    info = report()
    assert info["native kernels"] == "built"
    assert set(native.kernels()) >= {"spmm_csr", "spmm_sell", "sample_neighbors", "tt_lookup"}
    assert info["native built kernels"] == ", ".join(native.kernels())
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for key in ("torch", "torch CUDA", "DALI", "threads (torch)", "native kernels", "spmm_csr", "tt_lookup"):
        assert key in out


def test_doctor_without_building(monkeypatch, capsys):
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    assert main(["doctor", "--no-build"]) == 0
    assert "off (GNNKIT_NATIVE=0)" in capsys.readouterr().out


def test_doctor_without_building_tells_whether_a_build_is_on_disk(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GNNKIT_NATIVE", "1")
    monkeypatch.setenv("GNNKIT_NATIVE_CACHE", str(tmp_path))
    assert report(build=False)["native kernels"].startswith("not built (the first use builds them")
    folder = loader.build_dir()
    folder.mkdir(parents=True)
    loader.library_path(folder, loader.build_key()).write_bytes(b"")
    assert report(build=False)["native kernels"] == "built (not loaded: --no-build)"
