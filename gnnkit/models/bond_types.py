"""OGB's ``BondEncoder`` as one table of bond types, for the fused GINE sum (:mod:`gnnkit.native.gine`).

OGB's molecule encoders (<https://github.com/snap-stanford/ogb/blob/master/ogb/graphproppred/mol_encoder.py>)
embed a bond as the sum of one learned vector per bond feature (type, stereo, conjugation). A
molecule's bonds take only 5 x 6 x 2 = 60 combinations of those values, so every layer's bond
embeddings are the rows of a 60-row table indexed by each edge's bond type: the fused kernel reads
them from cache instead of an ``[E, d]`` tensor written by three lookups and two additions, and
sums their gradient into the table instead of writing ``[E, d]`` gradients for three embedding
backward passes. Values and gradients are the encoder's (the rows are summed in its order).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from gnnkit.native.gine import EdgeCodes

#: Most bond types (combinations of bond feature values) :class:`BondTypes` embeds as one table.
MAX_BOND_TYPES = 4096


def bond_codes(encoder: nn.Module, edge_attr: Tensor) -> EdgeCodes | None:
    """Each edge's bond type (its feature values in mixed radix: the row of :meth:`BondTypes.of`'s
    table) for ``encoder``, an OGB ``BondEncoder``, checked against its vocabularies; ``None`` for
    any other encoder, float features or more than :data:`MAX_BOND_TYPES` types."""
    tables = getattr(encoder, "bond_embedding_list", None)
    if tables is None or edge_attr.dim() != 2 or not 1 <= edge_attr.size(1) <= len(tables) or (
            edge_attr.is_floating_point()):
        return None
    sizes = [t.num_embeddings for t in tables[: edge_attr.size(1)]]
    types = math.prod(sizes)
    if types > MAX_BOND_TYPES:
        return None
    attr = edge_attr.to(torch.int64)
    bad = (attr < 0) | (attr >= torch.tensor(sizes, device=attr.device))
    if bool(bad.any()):
        column = int(bad.any(0).nonzero()[0])
        raise ValueError(f"edge_attr: bond feature {column} must lie in [0, {sizes[column]}) (the vocabulary of "
                         "OGB's BondEncoder), got values outside it")
    codes = attr[:, 0]
    for k in range(1, len(sizes)):
        codes = codes * sizes[k] + attr[:, k]
    return EdgeCodes(codes.contiguous(), types)  # in [0, types) by construction: checked above


class BondTypes(NamedTuple):
    """OGB's ``BondEncoder`` as one table of bond types: ``e_ij = table[codes_ij]``, where row
    ``(a_0 n_1 + a_1) n_2 + a_2 ...`` holds ``emb_0[a_0] + emb_1[a_1] + ...`` (a molecule's bonds
    take one of 5 x 6 x 2 = 60 types).

    The table is built per layer from the encoder's (differentiable: its gradient flows back into
    each embedding), ``codes`` (:func:`bond_codes`) once per batch. The fused kernel
    (:func:`gnnkit.native.gine.gine_sum_coded`) reads the rows from cache, so the ``[E, d]``
    embeddings are never written; :meth:`dense` looks them up.
    """

    table: Tensor
    codes: EdgeCodes

    @classmethod
    def of(cls, encoder: nn.Module, codes: EdgeCodes, features: int) -> BondTypes:
        """Every bond type's embedding by ``encoder``'s first ``features`` tables (each layer has its
        own encoder, all of the same sizes), summed in the encoder's order."""
        tables = [t.weight for t in encoder.bond_embedding_list[:features]]
        table = tables[0]
        for t in tables[1:]:
            table = (table.unsqueeze(1) + t.unsqueeze(0)).reshape(-1, t.size(1))
        return cls(table, codes)

    def dense(self) -> Tensor:
        """``[E, d]`` embeddings."""
        return self.table.index_select(0, self.codes.codes)
