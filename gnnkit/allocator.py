"""Host allocator tuning: keep freed tensor memory for reuse instead of handing it back to the OS.

glibc serves every allocation above its mmap threshold (at most 32 MiB by default) with a fresh
``mmap`` and unmaps it on free. A full-graph layer allocates activations of ``N x F`` floats
(87 MB for 169k nodes at width 128) several times per step, so each step page-faults its whole
working set again: about 630k minor faults and 20-25% of the step time of a GCN step on this
machine. Raising the threshold and the trim threshold makes glibc keep freed blocks in its heap,
as PyTorch's CPU performance tuning guide achieves by switching to jemalloc or tcmalloc
<https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html>. The cost is that the process
keeps its peak heap size until it exits. The heap settles after a few steps, not at once: PyTorch
asks for 64-byte aligned blocks, which a lone freed block of exactly the same size cannot serve, so a
round can still take a fresh block until freed neighbours have coalesced.

The heap also fragments: on the arxiv twin the GCN recipe's peak resident memory was 2.2x (4.6 GiB
against 2.1 GiB) with freed blocks kept, for epochs 1.7x faster. Where memory is short (the
products twin: 22.2 GiB against 18.9 GiB, the same epoch time) :func:`release_freed_memory` hands
the blocks back; :class:`gnnkit.host_memory_guard.HostMemoryGuard` calls it during a run once the
process holds half of the memory it could have.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

from pipeline.env_switch import switch

# mallopt() parameters, from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

# glibc's own mmap threshold, trim threshold and top pad (128 KiB each: mallopt(3)), which
# release_freed_memory() restores.
GLIBC_DEFAULT = 128 * 1024

DISABLE_ENV = "GNNKIT_RETAIN_FREED_MEMORY"

_retaining = False  # set by retain_freed_memory(), cleared by release_freed_memory()


def is_retaining() -> bool:
    """Whether this process keeps freed blocks (:func:`retain_freed_memory` took, no release since)."""
    return _retaining


def retain_freed_memory(mmap_threshold: int = 1 << 30, top_pad: int = 64 << 20) -> bool:
    """Make glibc's ``malloc`` reuse freed blocks up to ``mmap_threshold`` bytes instead of unmapping them.

    A no-op (returning ``False``) where the C library is not glibc, or when the environment
    variable ``GNNKIT_RETAIN_FREED_MEMORY`` is ``0``. ``gnnkit run`` and the formats, comm and
    native benchmarks call it at start; call it yourself in a script that trains with your own
    ``Trainer``.

    Args:
        mmap_threshold: Allocations below this many bytes come from the heap, not from ``mmap``.
        top_pad: Extra bytes requested from the OS whenever the heap grows.

    Returns:
        Whether every setting was accepted.
    """
    global _retaining
    if not switch(DISABLE_ENV, True):
        return False
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    settings = ((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, 2**31 - 1), (M_TOP_PAD, top_pad))
    _retaining = all(mallopt(param, value) == 1 for param, value in settings)
    return _retaining


def release_freed_memory() -> bool:
    """Undo :func:`retain_freed_memory`: large blocks are mapped and unmapped again (glibc's default
    thresholds), and the freed memory the heap holds goes back to the OS now (``malloc_trim``).

    Returns:
        Whether the C library took the settings (``False`` where it is not glibc).
    """
    global _retaining
    mallopt, trim = _libc_function("mallopt"), _libc_function("malloc_trim")
    if mallopt is None or trim is None:
        return False
    _retaining = False
    settings = ((M_MMAP_THRESHOLD, GLIBC_DEFAULT), (M_TRIM_THRESHOLD, GLIBC_DEFAULT), (M_TOP_PAD, GLIBC_DEFAULT))
    accepted = all(mallopt(param, value) == 1 for param, value in settings)
    trim(0)
    return accepted


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, found once (``find_library`` may run ``ldconfig``)."""
    library = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(library) if library is not None else None
    except OSError:
        return None


def _libc_function(name: str) -> Any:
    """glibc's ``mallopt(int, int)`` or ``malloc_trim(size_t)``, or ``None`` (another C library)."""
    function = getattr(_libc(), name, None)  # absent outside glibc (musl, macOS, Windows)
    if function is None:
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int] if name == "mallopt" else [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function
