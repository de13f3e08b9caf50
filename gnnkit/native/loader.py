"""Builds, caches and loads gnnkit's native kernels (the sources in the repository's ``cuda/``).

The extension is compiled on first use with :func:`torch.utils.cpp_extension.load` (ninja) into
``$GNNKIT_HOME/native/<key>`` (``$GNNKIT_NATIVE_CACHE/<key>`` if set), where the key hashes the sources
and the folder they are in (two checkouts never share, hence never rebuild, one build folder), the
torch and Python versions, the compiler flags and the CPU's instruction-set flags (the code is built
with ``-march=native``); later processes find the built library there and load it in well under a
second. A build announces itself (``building native kernels (about a minute on 2 cores, once) into ...``)
and its time, on gnnkit's log or, when that is not set up, on stderr. The CUDA kernels
(``cuda/gpu``) join the build only when torch has CUDA and a GPU is visible (or
``GNNKIT_NATIVE_CUDA=1``: :func:`cuda_mode`). Concurrent builds into the same folder are serialised
by an ``flock`` that the system releases when its holder dies (:func:`build_lock`), so no process
waits forever on a killed build.

If the build is impossible (no compiler, no sources), :func:`get` returns ``None`` after one
warning line and gnnkit keeps its pure-PyTorch paths. ``GNNKIT_NATIVE=0`` turns the native
kernels off without building; :func:`disabled` does the same inside a ``with`` block.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

from pipeline.env_switch import OFF, ON, switch
from pipeline.errors import DatasetError

__all__ = ["available", "build_dir", "build_seconds", "cuda_mode", "disabled", "enabled", "get", "kernels",
           "library_path", "reset", "source_dir", "status"]

_CFLAGS = ["-O3", "-march=native", "-fopenmp"]  # the C++ standard is torch's choice
_LDFLAGS = ["-fopenmp"]
_NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr"]

_lock = threading.Lock()
_module: ModuleType | None = None
_error: str | None = None  # why the build failed (then it is not retried in this process)
_off_depth = 0
_by_key: dict[str, ModuleType] = {}  # every build loaded in this process (torch cannot load one twice)
_build_seconds = 0.0  # spent building the kernels in this process


def build_seconds() -> float:
    """Seconds this process has spent building the native kernels (a first use builds them), which
    a timer of training leaves out."""
    return _build_seconds


def source_dir() -> Path:
    """The ``cuda/`` source folder (``$GNNKIT_NATIVE_SRC`` overrides the repository's)."""
    env = os.environ.get("GNNKIT_NATIVE_SRC")
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[2] / "cuda"


def cuda_mode() -> str:
    """``GNNKIT_NATIVE_CUDA``: ``auto`` (default: with a visible GPU), ``on`` (whenever torch has CUDA
    and nvcc is found, e.g. to build on a machine without a GPU, with ``TORCH_CUDA_ARCH_LIST`` naming
    the GPUs) or ``off`` (the values of :func:`pipeline.env_switch.switch`)."""
    value = os.environ.get("GNNKIT_NATIVE_CUDA", "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value not in ON + OFF:
        raise DatasetError("GNNKIT_NATIVE_CUDA", f"expected auto, {', '.join(ON)} (on) or {', '.join(OFF)} (off), "
                                                 f"got {os.environ['GNNKIT_NATIVE_CUDA']!r}")
    return "on" if value in ON else "off"


def with_cuda() -> bool:
    """Whether the build includes the CUDA kernels: torch has CUDA, a GPU is visible (or
    ``GNNKIT_NATIVE_CUDA=1``, :func:`cuda_mode`) and a CUDA compiler is found (a pip-installed CUDA
    torch comes without nvcc: the CPU kernels are then still built, and the GPU uses torch's own
    operations)."""
    mode = cuda_mode()
    wanted = mode == "on" or (mode == "auto" and torch.cuda.is_available())
    return torch.version.cuda is not None and wanted and cuda_compiler() is not None


def cuda_compiler() -> str | None:
    """The nvcc of the CUDA toolkit torch's extension builder would compile with (``CUDA_HOME``,
    which falls back to /usr/local/cuda, a folder CUDA runtime images have without nvcc), or None."""
    home = _cpp_extension().CUDA_HOME
    nvcc = Path(home) / "bin" / "nvcc" if home else None
    return str(nvcc) if nvcc is not None and nvcc.is_file() else None


def sources(cuda: bool | None = None) -> list[Path]:
    """The files compiled into the extension: the binding, the CPU kernels, and with ``cuda`` the
    ``.cu`` kernels and their torch glue."""
    root = source_dir()
    files = [root / "bindings.cpp", *sorted((root / "cpu").glob("*.cpp"))]
    if with_cuda() if cuda is None else cuda:
        files += sorted((root / "gpu").glob("*.cu")) + sorted((root / "gpu").glob("*.cpp"))
    return files


def _cpu_flags() -> str:
    """The CPU's instruction-set flags (``-march=native`` code must not run on another CPU)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cuda_archs() -> str:
    """The GPU architectures a CUDA build is compiled for, as torch's extension builder picks them:
    ``TORCH_CUDA_ARCH_LIST``, else the visible GPUs' compute capabilities (else its default list)."""
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if listed:
        return listed
    if torch.cuda.is_available():
        found = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        return ";".join(f"{major}.{minor}" for major, minor in sorted(found))
    return "default"


def build_key(cuda: bool | None = None) -> str:
    """Hash of everything the built library depends on (with the CUDA kernels, also the GPU
    architectures they are compiled for: a build for another GPU would fail at its first launch)."""
    cuda = with_cuda() if cuda is None else cuda
    h = hashlib.sha256()
    root = source_dir()
    h.update(str(root.resolve()).encode())  # torch's build.ninja names the sources by absolute path
    for path in sorted(sources(cuda)) + sorted(root.rglob("*.h")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    for part in (torch.__version__, str(torch.version.cuda), sys.version, str(cuda), " ".join(_CFLAGS),
                 " ".join(_NVCC_FLAGS), _cpu_flags(), cuda_archs() if cuda else ""):
        h.update(part.encode())
    return h.hexdigest()[:16]


def build_dir(cuda: bool | None = None) -> Path:
    """``$GNNKIT_NATIVE_CACHE/<key>`` (default ``$GNNKIT_HOME/native/<key>``), the folder of this build."""
    env = os.environ.get("GNNKIT_NATIVE_CACHE")
    if env:
        return Path(env).expanduser() / build_key(cuda)
    from pipeline import paths

    return paths.gnnkit_home() / "native" / build_key(cuda)


def enabled() -> bool:
    """Whether native kernels may be used (``GNNKIT_NATIVE`` is not ``0`` and no :func:`disabled` is active)."""
    return _off_depth == 0 and switch("GNNKIT_NATIVE", True)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside the block gnnkit uses its pure-PyTorch paths (for baselines and tests)."""
    global _off_depth
    _off_depth += 1
    try:
        yield
    finally:
        _off_depth -= 1


@contextlib.contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder/.gnnkit-build.lock`` while building or loading.

    Processes that start together take turns: the first builds, the others then find the build
    done. The operating system releases the lock when its holder dies, so a killed build never
    blocks the next one; and since only the holder can be building, a leftover ``lock`` file of
    torch's own baton (what a killed torch build leaves behind, on which torch would wait forever)
    is stale and removed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): torch's baton alone
        yield
        return
    with open(folder / ".gnnkit-build.lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            with contextlib.suppress(FileNotFoundError):
                (folder / "lock").unlink()
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _cpp_extension() -> ModuleType:
    """torch's extension builder, imported without the line it logs on a machine with a CUDA toolkit
    but no GPU ("No CUDA runtime is found, using CUDA_HOME=..."): gnnkit builds its CPU kernels there,
    as :func:`with_cuda` says."""
    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        log.setLevel(level)
    return cpp_extension


def _build(verbose: bool) -> ModuleType:
    cpp_extension = _cpp_extension()
    cuda = with_cuda()
    files = sources(cuda)
    missing = [str(p) for p in files[:1] if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"native sources not found ({', '.join(missing)})")
    key = build_key(cuda)
    if key in _by_key:
        return _by_key[key]
    folder = build_dir(cuda)
    default_jobs = "MAX_JOBS" not in os.environ  # torch's default (cores + 2) oversubscribes small machines
    if default_jobs:
        os.environ["MAX_JOBS"] = str(max(1, min(8, os.cpu_count() or 1)))
    try:
        module = _load(cpp_extension, key, files, folder, cuda, verbose)
    finally:
        if default_jobs:
            del os.environ["MAX_JOBS"]
    _by_key[key] = module
    return module


def _say(message: str) -> None:
    """A progress line: on gnnkit's log when it is set up, else on stderr (never silence)."""
    log = logging.getLogger("gnnkit")
    if log.handlers and log.isEnabledFor(logging.INFO):
        log.info("%s", message)
    else:
        print(f"[gnnkit] {message}", file=sys.stderr, flush=True)


def library_path(folder: Path, key: str) -> Path:
    """The built extension in ``folder`` (what torch's build writes last)."""
    return folder / f"gnnkit_native_{key}{'.pyd' if sys.platform == 'win32' else '.so'}"


def _load(cpp_extension: ModuleType, key: str, files: list[Path], folder: Path, cuda: bool,
          verbose: bool) -> ModuleType:
    """``cpp_extension.load`` of the sources into ``folder``, under :func:`build_lock`; a build
    (no library there yet) is announced with its folder and then its time."""
    cflags = _CFLAGS + (["-DGNNKIT_WITH_CUDA"] if cuda else [])
    with build_lock(folder):
        building = not library_path(folder, key).is_file()
        if building:
            _say(f"building native kernels (about a minute on 2 cores, once) into {folder}")
        start = time.perf_counter()
        module = cpp_extension.load(
            name=f"gnnkit_native_{key}",
            sources=[str(p) for p in files],
            extra_cflags=cflags,
            extra_cuda_cflags=_NVCC_FLAGS + ["-DGNNKIT_WITH_CUDA"],
            extra_ldflags=_LDFLAGS,
            extra_include_paths=[str(source_dir())],
            build_directory=str(folder),
            with_cuda=cuda,
            verbose=verbose,
        )
    if building:
        global _build_seconds
        took = time.perf_counter() - start
        _build_seconds += took
        _say(f"native kernels built in {took:.0f}s")
    return module


def get(verbose: bool = False) -> ModuleType | None:
    """The loaded extension, building it on first use; ``None`` when disabled or unbuildable.

    A failed build warns once (one line) and is not retried in this process.
    """
    global _module, _error
    if not enabled():
        return None
    if _module is not None or _error is not None:
        return _module
    cuda_mode()  # a bad GNNKIT_NATIVE_CUDA is the user's line to fix, not a failed build to fall back from
    with _lock:
        if _module is None and _error is None:
            try:
                _module = _build(verbose)
            except Exception as err:  # noqa: BLE001  (any build failure means: fall back)
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                _error = f"{type(err).__name__}: {first}"
                warnings.warn(f"gnnkit: native kernels unavailable, using pure PyTorch ({_error[:200]})",
                              RuntimeWarning, stacklevel=2)
    return _module


def reset() -> None:
    """Forget the loaded extension and any build failure, so the next :func:`get` tries again.

    An extension module once imported stays in the process; this only makes :func:`get` look
    for it (or build it) again, e.g. after changing ``GNNKIT_NATIVE_SRC`` in tests.
    """
    global _module, _error
    with _lock:
        _module, _error = None, None


def available() -> bool:
    """Whether the native kernels are enabled and built (builds them on first call)."""
    return get() is not None


def kernels() -> list[str]:
    """Names of the kernels in the loaded build (empty when unavailable)."""
    module = get()
    return list(module.kernels()) if module is not None else []


def status() -> dict[str, object]:
    """What ``gnnkit doctor`` reports about the native build."""
    module = get()
    return {
        "enabled": enabled(),
        "built": module is not None,
        "with_cuda": with_cuda(),
        "kernels": list(module.kernels()) if module is not None else [],
        "build_dir": str(build_dir()) if source_dir().is_dir() else None,
        "error": _error,
    }
