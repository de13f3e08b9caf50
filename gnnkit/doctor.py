"""``gnnkit doctor``: what this installation runs on (torch, CUDA, DALI, threads, native kernels)."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
from typing import Any

import torch


def _dali_version() -> str:
    """The installed NVIDIA DALI version, or why there is none."""
    for dist in ("nvidia-dali-cuda120", "nvidia-dali-cuda110", "nvidia-dali-cuda130"):
        try:
            return f"{importlib.metadata.version(dist)} ({dist})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def report(build: bool = True) -> dict[str, Any]:
    """The facts ``gnnkit doctor`` prints.

    Args:
        build: Build the native kernels if they are not built yet (otherwise only report).

    Returns:
        A flat dict of names to values.
    """
    from gnnkit.native import loader

    cuda = torch.version.cuda
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch CUDA": cuda or "none (CPU build)",
        "GPUs": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "DALI": _dali_version(),
        "threads (torch)": torch.get_num_threads(),
        "CPU cores": os.cpu_count(),
        "parallel backend": torch.__config__.parallel_info().splitlines()[-1].strip(),
    }
    native = loader.status() if build else {"enabled": loader.enabled(), "built": None, "kernels": [],
                                            "build_dir": str(loader.build_dir()), "error": None,
                                            "with_cuda": loader.with_cuda()}
    if not build and native["enabled"] and loader.source_dir().is_dir():
        on_disk = loader.library_path(loader.build_dir(), loader.build_key()).is_file()
        native["built"] = None if not on_disk else "on disk"
    state = "off (GNNKIT_NATIVE=0)" if not native["enabled"] else {
        True: "built", "on disk": "built (not loaded: --no-build)",
        None: "not built (the first use builds them, about a minute on 2 cores, once)",
    }.get(native["built"], f"unavailable: {native['error']}")
    info["native kernels"] = state
    info["native CUDA part"] = "yes" if native["with_cuda"] else (
        "no (GNNKIT_NATIVE_CUDA=0)" if loader.cuda_mode() == "off" else "no (no CUDA torch, no GPU or no nvcc)")
    info["native built kernels"] = ", ".join(native["kernels"]) or "-"
    info["native build dir"] = native["build_dir"] or "-"
    return info


def _doctor(args: argparse.Namespace) -> int:
    info = report(build=not args.no_build)  # a bad setting (GNNKIT_NATIVE_CUDA) is the CLI's one line
    width = max(len(k) for k in info)
    for key, value in info.items():
        print(f"{key.ljust(width)}  {value}")
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``gnnkit doctor`` to the ``gnnkit`` command."""
    p = subparsers.add_parser("doctor", help="versions, threads and the native kernels of this installation")
    p.add_argument("--no-build", action="store_true", help="report without building the native kernels")
    p.set_defaults(func=_doctor)
