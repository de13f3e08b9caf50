"""The canonical graph every source is converted into, and its validation.

Contract (DESIGN.md): node ids ``0..N-1``; CSR rows are destination nodes (messages flow from
``indices`` into the row); no out-of-range ids; finite float32 features or none; one label per node
(``[N]`` int64 for single-task classification, ``[N, T]`` for multi-task; ``-1`` or NaN marks an
unlabelled node); split index arrays disjoint, in range and labelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import DatasetError

if TYPE_CHECKING:  # torch is imported where a graph's tensors are made, not by ``import pipeline``
    from torch import Tensor

SPLITS = ("train", "valid", "test")


@dataclass
class CanonicalGraph:
    """A node-property graph in CSR form, rows = destinations.

    Attributes:
        indptr: ``int64 [N+1]`` row pointer.
        indices: ``int64 [nnz]`` source node of each edge, grouped by destination row.
        x: ``float32 [N, F]`` node features, or ``None`` for a featureless graph.
        y: ``int64 [N]`` class labels (-1 = unlabelled), or ``[N, T]`` multi-task labels.
        split: ``{"train", "valid", "test"}`` -> ``int64`` node index arrays.
        meta: Task description: ``num_classes``, ``num_tasks``, ``task_type``, ``eval_metric``,
            ``name`` and anything else the source recorded.
        extra: Further node arrays (``node_year``, reordering permutations, ...).
    """

    indptr: Tensor
    indices: Tensor
    x: Tensor | None
    y: Tensor
    split: dict[str, Tensor]
    meta: dict[str, Any]
    extra: dict[str, Tensor] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel() - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    def edge_index(self) -> Tensor:
        """Edges as a PyG ``[2, nnz]`` tensor ``(source, destination)``."""
        import torch

        dst = torch.repeat_interleave(
            torch.arange(self.num_nodes, dtype=torch.int64), self.indptr.diff()
        )
        return torch.stack([self.indices.to(torch.int64), dst])

    def degree(self) -> Tensor:
        """In-degree of every node (number of messages it receives)."""
        return self.indptr.diff()


def edges_to_csr(
    src: np.ndarray, dst: np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Group edges by destination into CSR, sources sorted within each row.

    Args:
        src: Source node of each edge.
        dst: Destination node of each edge.
        num_nodes: N.

    Returns:
        ``(indptr [N+1], indices [nnz])``, both int64.
    """
    order = np.lexsort((src, dst))
    indices = np.ascontiguousarray(src[order], dtype=np.int64)
    counts = np.bincount(dst, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, indices


def whole(values: np.ndarray) -> np.ndarray:
    """Which of ``values`` (a float array) are whole numbers: finite and without a fraction (``3.0``,
    not ``3.5``, NaN or inf), as ids and class labels must be."""
    return np.isfinite(values) & (values == np.round(values))


#: Bytes a node costs the in-memory CSR build before any edge: its row pointer and its degree count.
CSR_BYTES_PER_NODE = 16


def check_node_count_fits(num_nodes: int, where: str) -> None:
    """Refuse a node count whose CSR row pointers alone exceed the memory available now (a typo such
    as 3,000,000,000 for 3,000 ran out of memory deep in the build, or was killed by the kernel)."""
    from pipeline.progress import available_memory_mb

    need_mb, free_mb = CSR_BYTES_PER_NODE * (num_nodes + 1) / 2**20, available_memory_mb()
    if free_mb is not None and need_mb > free_mb:
        raise DatasetError(where, f"{num_nodes:,} nodes need {need_mb / 1024:.1f} GiB for the CSR's row pointers "
                           f"and degree counts alone, and {free_mb / 1024:.1f} GiB of memory is available; "
                           "is the node count right?")


def check_edges(edge_index: np.ndarray, num_nodes: int, where: str) -> None:
    """Reject an edge list that is malformed or names nodes outside ``0..N-1``."""
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DatasetError(where, f"expected edges of shape [2, E], got {list(edge_index.shape)}")
    if edge_index.size == 0:
        return
    lo, hi = int(edge_index.min()), int(edge_index.max())
    if lo < 0 or hi >= num_nodes:
        bad = lo if lo < 0 else hi
        raise DatasetError(where, f"edge endpoint {bad} out of range [0, {num_nodes})")


def check_features(x: np.ndarray | None, num_nodes: int, where: str) -> None:
    """Reject node features of the wrong length or with NaN/inf entries."""
    if x is None:
        return
    if x.ndim != 2 or x.shape[0] != num_nodes:
        raise DatasetError(where, f"expected {num_nodes} rows of features, got shape {list(x.shape)}")
    finite = np.isfinite(x).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise DatasetError(where, f"non-finite feature value in row {row}")


def check_labels(y: np.ndarray, num_nodes: int, num_classes: int, where: str) -> None:
    """Reject labels of the wrong length or outside ``[0, num_classes)`` (-1/NaN = unlabelled)."""
    if y.shape[0] != num_nodes:
        raise DatasetError(where, f"expected {num_nodes} labels (one per node), got {y.shape[0]}")
    if y.ndim == 1 and y.size:
        labelled = y[y >= 0]
        if labelled.size and int(labelled.max()) >= num_classes:
            raise DatasetError(
                where, f"label {int(labelled.max())} out of range [0, {num_classes})"
            )


def check_splits(
    split: dict[str, np.ndarray], num_nodes: int, where: dict[str, str]
) -> None:
    """Reject split index arrays that are missing, out of range or overlapping."""
    seen = np.zeros(num_nodes, dtype=np.int8)
    for name in SPLITS:
        if name not in split:
            raise DatasetError(where.get(name, "split"), f"missing the '{name}' split")
        idx = split[name]
        if idx.ndim != 1:
            raise DatasetError(where[name], f"expected a 1-D index list, got shape {list(idx.shape)}")
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= num_nodes):
            bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
            raise DatasetError(where[name], f"node index {bad} out of range [0, {num_nodes})")
        if np.unique(idx).size != idx.size:
            raise DatasetError(where[name], "node indices repeat within the split")
        if seen[idx].any():
            node = int(idx[seen[idx] > 0][0])
            raise DatasetError(where[name], f"overlaps an earlier split (node {node} is in both)")
        seen[idx] = 1


def check_split_labels(y: np.ndarray, split: dict[str, np.ndarray], where: str) -> None:
    """Every node in a split must carry a label."""
    for name in SPLITS:
        lab = y[split[name]]
        missing = (lab < 0) if y.ndim == 1 else np.isnan(lab).all(axis=1)
        if np.any(missing):
            raise DatasetError(where, f"{int(missing.sum())} nodes of the '{name}' split have no label")
