"""``TTConfig``: the shape of a tensor-train (TT) embedding table and how it is looked up."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gnnkit import setting_checks

INITS = ("orthogonal", "normal")


def _positive_ints(name: str, values: tuple[int, ...]) -> tuple[int, ...]:
    """``values`` as a tuple of Python ints (numpy's integers too), each ``>= 1``."""
    if not isinstance(values, (tuple, list)):
        raise ValueError(f"TTConfig.{name}: expected a list of positive integers, got {values!r}")
    if not values or not all(setting_checks.is_whole(v, 1) for v in values):
        raise ValueError(f"TTConfig.{name}: expected positive integers, got {values!r}")
    return tuple(int(v) for v in values)


@dataclass(frozen=True)
class TTConfig:
    r"""Shape and lookup options of a TT-compressed embedding table.

    The table ``W`` of ``num_embeddings`` rows and ``prod(q_shapes)`` columns is stored as ``d``
    cores as in TT-Rec ("TT-Rec: Tensor Train Decomposition for Deep Learning Recommendation Model
    Embeddings", <https://arxiv.org/abs/2101.11714>): core ``k`` has shape
    ``[p_k, r_{k-1}, q_k, r_k]`` with ``r_0 = r_d = 1``, and row ``i`` with mixed-radix digits
    ``(i_1, ..., i_d)`` (``i_1`` most significant) is the product
    ``G_1[i_1] G_2[i_2] ... G_d[i_d]`` flattened row-major over ``(j_1, ..., j_d)``.

    Args:
        num_embeddings (int): Rows of the table (``<= prod(p_shapes)``).
        p_shapes (tuple[int, ...]): Row factorisation, one entry per core (at least 2 cores).
        q_shapes (tuple[int, ...]): Column factorisation; ``embedding_dim = prod(q_shapes)``.
        ranks (tuple[int, ...]): The ``d - 1`` inner TT ranks (one int: the same for every core).
        init (str): ``"orthogonal"`` (semi-orthogonal core slices, Yin et al., "Nimble GNN
            Embedding with Tensor-Train Decomposition", KDD 2022,
            <https://arxiv.org/abs/2206.10581>) or ``"normal"`` (Gaussian cores); both are scaled so
            the table's entries have mean square 1, like ``nn.Embedding``'s ``N(0, 1)`` rows.
            Default ``"orthogonal"``.
        dedup (bool): Contract each distinct index of a batch once. Default ``True``.
        prefix_reuse (bool): Contract each distinct prefix ``(i_1, ..., i_k)`` of the batch's rows
            once and share it across the rows below it (needs ``dedup``). Default ``True``.
        hot_rows (int): Capacity of the cache of decompressed hot rows (0 = no cache). Default 0.
    """

    num_embeddings: int
    p_shapes: tuple[int, ...]
    q_shapes: tuple[int, ...]
    ranks: tuple[int, ...]
    init: str = "orthogonal"
    dedup: bool = True
    prefix_reuse: bool = True
    hot_rows: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "p_shapes", _positive_ints("p_shapes", self.p_shapes))
        object.__setattr__(self, "q_shapes", _positive_ints("q_shapes", self.q_shapes))
        if isinstance(self.num_embeddings, bool) or not isinstance(self.num_embeddings, int) or self.num_embeddings < 1:
            raise ValueError(f"TTConfig.num_embeddings: expected a positive integer, got {self.num_embeddings!r}")
        d = len(self.p_shapes)
        if d < 2 or len(self.q_shapes) != d:
            raise ValueError(
                f"TTConfig.q_shapes: expected {d} factors like p_shapes (and at least 2 cores), got {self.q_shapes!r}"
            )
        uniform = isinstance(self.ranks, int) and not isinstance(self.ranks, bool)
        ranks = (self.ranks,) * (d - 1) if uniform else self.ranks
        object.__setattr__(self, "ranks", _positive_ints("ranks", ranks))
        if len(self.ranks) != d - 1:
            raise ValueError(f"TTConfig.ranks: expected {d - 1} inner ranks for {d} cores (or one for all), got "
                             f"{ranks!r}")
        if self.num_embeddings > self.capacity:
            raise ValueError(
                f"TTConfig.p_shapes: prod{self.p_shapes} = {self.capacity} < num_embeddings = {self.num_embeddings}"
            )
        if self.init not in INITS:
            raise ValueError(f"TTConfig.init: expected one of {list(INITS)}, got {self.init!r}")
        for name in ("dedup", "prefix_reuse"):
            setting_checks.switch(f"TTConfig.{name}", getattr(self, name))
        if self.prefix_reuse and not self.dedup:
            raise ValueError("TTConfig.prefix_reuse: prefix reuse works on deduplicated rows; set dedup=True")
        if isinstance(self.hot_rows, bool) or not isinstance(self.hot_rows, int) or self.hot_rows < 0:
            raise ValueError(f"TTConfig.hot_rows: expected an integer >= 0, got {self.hot_rows!r}")

    @property
    def num_cores(self) -> int:
        return len(self.p_shapes)

    @property
    def embedding_dim(self) -> int:
        return math.prod(self.q_shapes)

    @property
    def capacity(self) -> int:
        """Rows the cores can address: ``prod(p_shapes)``."""
        return math.prod(self.p_shapes)

    @property
    def full_ranks(self) -> tuple[int, ...]:
        """``(1, r_1, ..., r_{d-1}, 1)``."""
        return (1, *self.ranks, 1)

    @property
    def core_shapes(self) -> list[tuple[int, int, int, int]]:
        """``[p_k, r_{k-1}, q_k, r_k]`` of every core."""
        r = self.full_ranks
        return [(p, r[k], q, r[k + 1]) for k, (p, q) in enumerate(zip(self.p_shapes, self.q_shapes))]

    @property
    def num_params(self) -> int:
        """Parameters in the cores."""
        return sum(math.prod(shape) for shape in self.core_shapes)

    @property
    def dense_params(self) -> int:
        """Parameters of the equivalent ``nn.Embedding``: ``num_embeddings * embedding_dim``."""
        return self.num_embeddings * self.embedding_dim

    @property
    def compression(self) -> float:
        """``dense_params / num_params``."""
        return self.dense_params / self.num_params
