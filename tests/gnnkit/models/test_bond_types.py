"""OGB's BondEncoder as one table of bond types: the encoder's embeddings, its vocabulary checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ogb.graphproppred.mol_encoder import BondEncoder

from gnnkit.models.bond_types import BondTypes, bond_codes


def test_bond_types_embed_like_the_bond_encoder():
    """One table row per bond type gives BondEncoder's sums exactly; features outside its vocabulary
    are named; float features and other encoders keep their own lookup."""
    torch.manual_seed(0)
    encoder = BondEncoder(8)
    sizes = [t.num_embeddings for t in encoder.bond_embedding_list]
    attr = torch.stack([torch.randint(0, n, (50,)) for n in sizes], 1)
    for k in (3, 2):
        codes = bond_codes(encoder, attr[:, :k])
        assert codes.num_rows == int(np.prod(sizes[:k]))
        assert torch.equal(BondTypes.of(encoder, codes, k).dense(), encoder(attr[:, :k]))
    attr[7, 1] = sizes[1]
    with pytest.raises(ValueError, match=rf"edge_attr: bond feature 1 must lie in \[0, {sizes[1]}\)"):
        bond_codes(encoder, attr)
    assert bond_codes(encoder, attr.float()) is None
    assert bond_codes(torch.nn.Linear(3, 8), attr) is None


def test_the_table_passes_gradients_to_each_embedding():
    torch.manual_seed(0)
    encoder = BondEncoder(4)
    attr = torch.stack([torch.randint(0, t.num_embeddings, (30,)) for t in encoder.bond_embedding_list], 1)
    weight = torch.randn(30, 4)
    params = [t.weight for t in encoder.bond_embedding_list]
    ours = torch.autograd.grad((BondTypes.of(encoder, bond_codes(encoder, attr), 3).dense() * weight).sum(), params)
    expected = torch.autograd.grad((encoder(attr) * weight).sum(), params)
    torch.testing.assert_close(ours, expected)
