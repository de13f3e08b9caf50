"""gnnkit.models.sampled_blocks: a batch's blocks are its prefixes, their shared arrays views of the batch's."""

import torch

from gnnkit.models.sampled_blocks import SampledBlocks
from gnnkit.sparse import Adjacency, spmm


def _batch() -> torch.Tensor:
    """3 seeds, then 5 and 6 nodes reached in two hops; edges hop by hop, by destination."""
    hop1 = [(3, 0), (4, 0), (5, 1), (6, 2), (7, 2), (3, 2)]
    hop2 = [(8, 3), (9, 3), (10, 5), (11, 6), (12, 7), (13, 7), (8, 7)]
    return torch.tensor(hop1 + hop2).t()


def test_a_block_equals_the_adjacency_of_its_edges_and_shares_the_batchs_arrays():
    edge_index = _batch()
    blocks = SampledBlocks(edge_index, 14)
    for num_dst, nnz, num_src in [(8, 13, 14), (3, 6, 8)]:  # the outer layer's block, then the seeds'
        block = blocks.block(num_dst, nnz, num_src)
        reference = Adjacency.from_edge_index(edge_index[:, :nnz], num_src, num_dst=num_dst)
        assert torch.equal(block.indptr, reference.indptr) and torch.equal(block.indices, reference.indices)
        assert torch.equal(block.rows(), reference.rows()) and torch.equal(block.row_counts(), reference.row_counts())
        assert torch.equal(block.inv_row_counts(), reference.inv_row_counts())
        assert torch.equal(block.weights(), reference.weights()) and block.single_use
        x = torch.randn(num_src, 4)
        for fmt in ("csr", "gather_scatter"):
            torch.testing.assert_close(spmm(block, x, reduce="mean", format=fmt), spmm(reference, x, reduce="mean"))
        # views of the batch's arrays, made once for all blocks
        assert block.inv_row_counts().data_ptr() == blocks.inv_counts.data_ptr()
        assert block.weights().data_ptr() == blocks.ones.data_ptr()
