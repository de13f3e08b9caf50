r"""``TTEmbedding``: an ``nn.Embedding`` whose table is stored as tensor-train cores."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from gnnkit.native import checks
from gnnkit.tt.cache import HotRowCache
from gnnkit.tt.config import TTConfig
from gnnkit.tt.init import init_cores_, tt_svd
from gnnkit.tt.lookup import contract, full_table, lookup, lookup_plain, prefix_plan


class TTEmbedding(nn.Module):
    r"""A node (or item) embedding table compressed as a tensor train.

    The TT-Rec layout ("TT-Rec: Tensor Train Decomposition for Deep Learning Recommendation Model
    Embeddings", <https://arxiv.org/abs/2101.11714>) with the orthogonal init and graph-aware row
    order of Nimble GNN Embedding (Yin et al., KDD 2022, <https://arxiv.org/abs/2206.10581>) and a
    FALCON-style cache of hot nodes (Qiu, Xia and Wang, IPDPS 2025). It behaves like
    ``nn.Embedding``: integer indices of any shape in, ``[*indices.shape, embedding_dim]`` out, and
    dense gradients on the cores, so DDP and any optimizer work unchanged.

    A lookup deduplicates the batch, contracts each distinct digit prefix once and shares it with
    the rows below it (:mod:`gnnkit.tt.lookup`); with ``config.hot_rows`` and :meth:`set_hot_nodes`,
    rows of hot nodes come from a :class:`~gnnkit.tt.cache.HotRowCache` that is rebuilt whenever the
    cores change. With an ``order``, node ``v`` is stored in TT row ``order[v]`` (a graph-aware
    numbering such as :func:`pipeline.reorder.node_order` puts neighbours in rows that share
    prefixes); callers keep their node ids, and the order is a buffer saved in checkpoints.

    Args:
        config (TTConfig): Shapes, ranks, init and lookup options.
        order (Tensor, optional): Permutation, node id -> TT row, ``[num_embeddings]``.
        generator (torch.Generator, optional): Random generator for the init.

    Example:
        >>> emb = TTEmbedding(auto_config(2_449_029, 100, compression=1000))
        >>> emb(batch.n_id).shape
        torch.Size([num_nodes_in_batch, 100])
    """

    order: Tensor | None

    def __init__(
        self, config: TTConfig, order: Tensor | None = None, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if not isinstance(config, TTConfig):
            raise TypeError(f"TTEmbedding: expected a TTConfig, got {type(config).__name__}")
        self.config = config
        self.cores = nn.ParameterList(nn.Parameter(torch.empty(shape)) for shape in config.core_shapes)
        init_cores_(list(self.cores), config.init, generator)
        self._cache: HotRowCache | None = None
        self._hot_nodes: Tensor | None = None
        self.register_buffer("order", None)
        if order is not None:
            self.set_order(order)

    @classmethod
    def from_features(cls, features: Tensor, config: TTConfig, order: Tensor | None = None) -> TTEmbedding:
        """A table initialised by TT-SVD of ``features`` ``[num_embeddings, embedding_dim]``
        (row ``v`` = node ``v``; the order is applied before decomposing)."""
        emb = cls(config, order=order).to(features.dtype)
        table = features
        if emb.order is not None:
            table = torch.empty_like(features)
            table[emb.order.long()] = features
        with torch.no_grad():
            for core, value in zip(emb.cores, tt_svd(table, config)):
                core.copy_(value)
        return emb

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{self.__class__.__name__}({c.num_embeddings}, {c.embedding_dim}, p_shapes={c.p_shapes}, "
            f"q_shapes={c.q_shapes}, ranks={c.ranks}, init={c.init!r}, dedup={c.dedup}, "
            f"prefix_reuse={c.prefix_reuse}, hot_rows={c.hot_rows})"
        )

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def num_embeddings(self) -> int:
        return self.config.num_embeddings

    @property
    def embedding_dim(self) -> int:
        return self.config.embedding_dim

    @property
    def num_params(self) -> int:
        """Trainable parameters (the cores)."""
        return self.config.num_params

    @property
    def compression(self) -> float:
        """``num_embeddings * embedding_dim / num_params``."""
        return self.config.compression

    def memory_bytes(self) -> dict[str, int]:
        """Bytes held by the cores, the node order and the hot-row cache."""
        cores = sum(p.numel() * p.element_size() for p in self.cores)
        order = 0 if self.order is None else self.order.numel() * self.order.element_size()
        cache = 0 if self._cache is None else self._cache.memory_bytes()
        return {"cores": cores, "order": order, "cache": cache, "total": cores + order + cache}

    def describe(self) -> dict[str, Any]:
        """What a run report records about the table."""
        c = self.config
        return {
            "kind": "tt",
            "num_params": self.num_params,
            "compression": round(self.compression, 2),
            "num_embeddings": c.num_embeddings,
            "embedding_dim": c.embedding_dim,
            "p_shapes": list(c.p_shapes),
            "q_shapes": list(c.q_shapes),
            "ranks": list(c.ranks),
            "init": c.init,
            "ordered": self.order is not None,
            "hot_rows": 0 if self._cache is None else len(self._cache),
            "memory_bytes": self.memory_bytes(),
        }

    # -- order and hot rows ------------------------------------------------------------------
    def set_order(self, order: Tensor) -> None:
        """Store nodes in TT rows ``order[v]``; ``order`` must be a permutation of
        ``0..num_embeddings-1``. Kept as int32 (int64 past 2**31 rows) in the ``order`` buffer."""
        n = self.num_embeddings
        order = torch.as_tensor(order)
        if order.dim() != 1 or order.numel() != n or order.dtype.is_floating_point:
            raise ValueError(f"TTEmbedding.set_order: expected {n} integer TT rows, got {order.dtype} {list(order.shape)}")
        seen = torch.zeros(n, dtype=torch.bool)
        ids = order.long().cpu()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ValueError(f"TTEmbedding.set_order: rows must lie in [0, {n})")
        seen[ids] = True
        if not bool(seen.all()):
            raise ValueError("TTEmbedding.set_order: order is not a permutation (a row is used twice)")
        dtype = torch.int32 if n < 2**31 else torch.int64
        device = self.cores[0].device
        if self.order is not None and self.order.shape == order.shape:
            self.order.copy_(order.to(device=device, dtype=self.order.dtype))
        else:
            self.order = order.to(device=device, dtype=dtype).contiguous()
        if self._hot_nodes is not None:
            self.set_hot_nodes(self._hot_nodes)

    def rows_of(self, indices: Tensor) -> Tensor:
        """TT rows of node ids (int64), after checking they are in range."""
        if not isinstance(indices, Tensor):
            raise TypeError(f"TTEmbedding: indices must be a torch integer tensor, got {type(indices).__name__}")
        if indices.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
            raise TypeError(f"TTEmbedding: indices must be an integer tensor, got {indices.dtype}")
        flat = indices.reshape(-1).long()
        if flat.numel():
            lo, hi = checks.bounds(flat)
            if lo < 0 or hi >= self.num_embeddings:
                raise IndexError(f"TTEmbedding: index {lo if lo < 0 else hi} out of range [0, {self.num_embeddings})")
        if self.order is not None:
            flat = self.order.index_select(0, flat).long()
        return flat

    def set_hot_nodes(self, nodes: Tensor | None) -> None:
        """Cache the decompressed rows of these node ids (at most ``config.hot_rows``);
        ``None`` or empty turns the cache off."""
        if nodes is not None and (not isinstance(nodes, Tensor) or nodes.is_floating_point() or nodes.is_complex()
                                  or nodes.dtype == torch.bool):
            got = nodes.dtype if isinstance(nodes, Tensor) else type(nodes).__name__
            raise TypeError(f"TTEmbedding.set_hot_nodes: nodes must be an integer tensor of node ids, got {got}")
        if nodes is None or nodes.numel() == 0:
            self._cache, self._hot_nodes = None, None
            return
        nodes = torch.unique(nodes.reshape(-1).long())
        if nodes.numel() > self.config.hot_rows:
            raise ValueError(
                f"TTEmbedding.set_hot_nodes: {nodes.numel()} nodes exceed config.hot_rows = {self.config.hot_rows}"
            )
        self._hot_nodes = nodes
        self._cache = HotRowCache(self.rows_of(nodes.to(self.cores[0].device)), self.config.p_shapes)

    def set_hot_nodes_by_degree(self, degree: Tensor) -> None:
        """Cache the ``config.hot_rows`` nodes of highest ``degree`` ``[num_embeddings]``."""
        if not isinstance(degree, Tensor):
            raise TypeError("TTEmbedding.set_hot_nodes_by_degree: degree must be a tensor, got "
                            f"{type(degree).__name__}")
        if degree.numel() != self.num_embeddings:
            raise ValueError(f"TTEmbedding.set_hot_nodes_by_degree: expected {self.num_embeddings} degrees, got {degree.numel()}")
        k = min(self.config.hot_rows, self.num_embeddings)
        self.set_hot_nodes(torch.topk(degree.float(), k).indices if k else None)

    @property
    def cache(self) -> HotRowCache | None:
        """The hot-row cache, if one is set."""
        return self._cache

    def _apply(self, fn: Any, recurse: bool = True) -> TTEmbedding:
        super()._apply(fn, recurse)
        if self._cache is not None:  # follow the cores; values are recomputed on next use
            self._cache.to(self.cores[0].device)
        return self

    # -- lookups ------------------------------------------------------------------------------
    def forward(self, indices: Tensor) -> Tensor:
        """Embeddings of ``indices`` (any shape) -> ``[*indices.shape, embedding_dim]``.

        Raises:
            IndexError: An index outside ``[0, num_embeddings)``.
        """
        rows = self.rows_of(indices)
        cores = list(self.cores)
        c = self.config
        training_on_gpu = self._training_on_gpu(cores)
        if self._cache is None or training_on_gpu:
            # Tables configured with a hot-row cache keep the Python contraction (whose levels the
            # cache stores), so cached and uncached lookups of the same cores agree bitwise; the
            # others, and training on a GPU, use the fused native kernel when it is built.
            out = lookup(cores, rows, c.p_shapes, dedup=c.dedup, prefix_reuse=c.prefix_reuse,
                         fused=c.hot_rows == 0 or training_on_gpu)
        else:
            out = self._cached_lookup(cores, rows)
        return out.reshape(*indices.shape, c.embedding_dim)

    @staticmethod
    def _training_on_gpu(cores: list[Tensor]) -> bool:
        """Whether this lookup trains cores on a GPU. Then the hot-row cache stands aside for the
        fused CUDA kernel: the cores change every step, so the cache would rebuild on every lookup
        (with host syncs for its freshness check and its cold rows) rather than serve; it serves
        the lookups without gradients (evaluation), where the cores stay the same."""
        return cores[0].is_cuda and torch.is_grad_enabled() and cores[0].requires_grad

    def _cached_lookup(self, cores: list[Tensor], rows: Tensor) -> Tensor:
        c = self.config
        cache = self._cache
        is_hot, slot = cache.match(rows)
        hot = cache.values(cores)
        cold_pos = torch.nonzero(~is_hot).squeeze(1)
        cold = rows.index_select(0, cold_pos)
        if c.dedup:
            unique, inverse = torch.unique(cold, sorted=True, return_inverse=True)
            values = contract(cores, prefix_plan(unique, c.p_shapes)) if c.prefix_reuse else lookup_plain(
                cores, unique, c.p_shapes)
        else:
            values, inverse = lookup_plain(cores, cold, c.p_shapes), torch.arange(cold.numel(), device=rows.device)
        gather = slot.clone()
        gather[cold_pos] = inverse + hot.shape[0]
        return torch.cat([hot, values]).index_select(0, gather)

    def lookup_plain(self, indices: Tensor) -> Tensor:
        """The baseline lookup without dedup, reuse or cache (every row contracts its own slices)."""
        rows = self.rows_of(indices)
        return lookup_plain(list(self.cores), rows, self.config.p_shapes).reshape(*indices.shape, self.embedding_dim)

    def full_table(self) -> Tensor:
        """The dense ``[num_embeddings, embedding_dim]`` table in node order (einsum reference;
        memory of the full table)."""
        table = full_table(list(self.cores), self.num_embeddings)
        return table if self.order is None else table.index_select(0, self.order.long())
