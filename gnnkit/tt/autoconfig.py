"""Choose TT shapes and ranks from a table size and a compression target or memory budget."""

from __future__ import annotations

import math
from typing import Any

from gnnkit import setting_checks
from gnnkit.tt.config import TTConfig

DEFAULT_RANK = 16


def _factorizations(n: int, parts: int, smallest: int = 1) -> list[tuple[int, ...]]:
    """All non-decreasing factorisations of ``n`` into ``parts`` factors >= ``smallest``."""
    if parts == 1:
        return [(n,)] if n >= smallest else []
    out = []
    f = smallest
    while f ** parts <= n:
        if n % f == 0:
            out += [(f, *rest) for rest in _factorizations(n // f, parts - 1, f)]
        f += 1
    return out


def _middle_small(factors: tuple[int, ...]) -> tuple[int, ...]:
    """Order factors so the smallest sit in the middle cores (whose size carries ``r^2``)."""
    ordered = sorted(factors, reverse=True)
    out: list[int] = [0] * len(ordered)
    left, right = 0, len(ordered) - 1
    for i, f in enumerate(ordered):  # largest at the ends, alternating inwards
        if i % 2 == 0:
            out[left], left = f, left + 1
        else:
            out[right], right = f, right - 1
    return tuple(out)


def factor_dim(dim: int, num_cores: int) -> tuple[int, ...]:
    """The most balanced exact factorisation of ``dim`` into ``num_cores`` factors.

    Raises:
        ValueError: ``dim`` cannot be split into factors > 1 (e.g. a prime), which would leave a
            core with ``q_k = 1``; pick a dimension such as 64, 100 or 128.
    """
    options = [f for f in _factorizations(dim, num_cores) if min(f) > 1]
    if not options:
        raise ValueError(f"auto_config: embedding_dim {dim} has no factorisation into {num_cores} factors > 1")
    best = min(options, key=lambda f: (max(f) / min(f), max(f)))
    return _middle_small(best)


def factor_rows(num_embeddings: int, num_cores: int) -> tuple[int, ...]:
    """Balanced ``p`` with ``prod(p) >= num_embeddings`` and as little slack as greedy finds."""
    base = max(1, math.ceil(num_embeddings ** (1.0 / num_cores) - 1e-9))
    while base ** num_cores < num_embeddings:
        base += 1
    p = [base] * num_cores
    for k in range(num_cores):
        others = math.prod(p) // p[k]
        p[k] = max(1, math.ceil(num_embeddings / others))
    return _middle_small(tuple(p))


def _max_ranks(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """Ranks beyond these add no expressiveness (the unfoldings' sizes)."""
    sizes = [a * b for a, b in zip(p, q)]
    return tuple(min(math.prod(sizes[: k + 1]), math.prod(sizes[k + 1 :])) for k in range(len(p) - 1))


def _params(p: tuple[int, ...], q: tuple[int, ...], ranks: tuple[int, ...]) -> int:
    r = (1, *ranks, 1)
    return sum(p[k] * r[k] * q[k] * r[k + 1] for k in range(len(p)))


def _check_arguments(num_embeddings: Any, embedding_dim: Any, num_cores: Any, rank: Any, compression: Any,
                     budget_bytes: Any, bytes_per_param: Any) -> None:
    """One line naming the argument (a negative ``num_cores`` looped forever in :func:`factor_rows`,
    ``rank=0`` became the default rank, a zero ``compression`` divided by zero)."""
    if sum(x is not None for x in (rank, compression, budget_bytes)) > 1:
        raise ValueError("auto_config: give at most one of rank, compression, budget_bytes")
    for name, value, low in (("num_embeddings", num_embeddings, 1), ("embedding_dim", embedding_dim, 1),
                             ("num_cores", num_cores, 2), ("bytes_per_param", bytes_per_param, 1)):
        setting_checks.at_least(f"auto_config: {name}", value, low, f"an integer >= {low}")
    setting_checks.optional_at_least("auto_config: rank", rank, 1, "an integer >= 1")
    setting_checks.optional_at_least("auto_config: budget_bytes", budget_bytes, 1, "an integer >= 1")
    if compression is not None:
        setting_checks.positive_number("auto_config: compression", compression)


def auto_config(
    num_embeddings: int,
    embedding_dim: int,
    *,
    num_cores: int = 3,
    rank: int | None = None,
    compression: float | None = None,
    budget_bytes: int | None = None,
    bytes_per_param: int = 4,
    init: str = "orthogonal",
    dedup: bool = True,
    prefix_reuse: bool = True,
    hot_rows: int = 0,
) -> TTConfig:
    """A :class:`TTConfig` for a ``[num_embeddings, embedding_dim]`` table.

    Row and column counts are split into ``num_cores`` balanced factors (smallest in the middle,
    where a core's size carries ``r^2``); then the largest uniform rank is taken that meets the
    target: ``compression`` (dense parameters / TT parameters >= it) or ``budget_bytes`` (core
    bytes <= it), or exactly ``rank`` (default 16 when no target is given). Ranks are capped where
    more would add nothing (the sizes of the unfoldings).

    Args:
        num_embeddings: Table rows.
        embedding_dim: Table columns.
        num_cores: Number of TT cores (``d``).
        rank: Use this uniform rank.
        compression: Minimum compression ratio.
        budget_bytes: Maximum bytes of the cores.
        bytes_per_param: 4 for float32.
        init, dedup, prefix_reuse, hot_rows: Passed to :class:`TTConfig`.

    Raises:
        ValueError: More than one target, or a target not met even at rank 1.
    """
    _check_arguments(num_embeddings, embedding_dim, num_cores, rank, compression, budget_bytes, bytes_per_param)
    num_embeddings, embedding_dim, num_cores = int(num_embeddings), int(embedding_dim), int(num_cores)  # numpy's
    p, q = factor_rows(num_embeddings, num_cores), factor_dim(embedding_dim, num_cores)
    caps = _max_ranks(p, q)

    def ranks_for(r: int) -> tuple[int, ...]:
        return tuple(min(r, c) for c in caps)

    dense = num_embeddings * embedding_dim
    if compression is None and budget_bytes is None:
        chosen = rank or DEFAULT_RANK
    else:
        limit = dense / compression if compression is not None else budget_bytes / bytes_per_param
        chosen = 0
        r = 1
        while _params(p, q, ranks_for(r)) <= limit:
            chosen = r
            if ranks_for(r + 1) == ranks_for(r):
                break
            r += 1
        if chosen == 0:
            target = f"compression {compression}" if compression is not None else f"budget {budget_bytes} bytes"
            raise ValueError(
                f"auto_config: {target} is out of reach even at rank 1 ({_params(p, q, ranks_for(1))} parameters "
                f"for p={p}, q={q}); lower the target or use more cores"
            )
    return TTConfig(num_embeddings, p, q, ranks_for(chosen), init=init, dedup=dedup, prefix_reuse=prefix_reuse,
                    hot_rows=hot_rows)
