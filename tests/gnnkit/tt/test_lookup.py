import itertools

import pytest
import torch

from gnnkit.tt import TTConfig, TTEmbedding
from gnnkit.tt.lookup import contract, contract_backward, full_table, lookup, lookup_plain, prefix_plan

SHAPES = [
    ((4, 3, 5), (2, 3, 2), (3, 4), 50),
    ((6, 7), (4, 3), (5,), 42),
    ((3, 2, 4, 2), (2, 1, 3, 2), (2, 3, 4), 40),
    ((5, 5, 5), (1, 4, 3), (1, 7), 125),
]
MODES = [dict(dedup=False, prefix_reuse=False), dict(dedup=True, prefix_reuse=False), dict(dedup=True, prefix_reuse=True)]


def _dense_grads(emb, idx, g):
    emb.zero_grad()
    (emb.full_table()[idx] * g).sum().backward()
    return [p.grad.clone() for p in emb.cores]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", MODES)
def test_lookup_matches_dense_table_values_and_gradients(shape, mode):
    p, q, r, n = shape
    gen = torch.Generator().manual_seed(len(p) * 100 + n)
    emb = TTEmbedding(TTConfig(n, p, q, r, **mode), generator=gen).double()
    # duplicates, out of order, first and last rows, a 2-D index shape
    idx = torch.cat([torch.randint(0, n, (37,), generator=gen), torch.tensor([n - 1, 0, n - 1, 3, 3])]).reshape(6, 7)
    dense = emb.full_table()
    out = emb(idx)
    assert out.shape == (6, 7, emb.embedding_dim)
    torch.testing.assert_close(out, dense[idx], rtol=1e-12, atol=1e-12)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    emb.zero_grad()
    (out * g).sum().backward()
    got = [c.grad.clone() for c in emb.cores]
    for a, b in zip(got, _dense_grads(emb, idx, g)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_full_table_is_an_independent_reference():
    # one row by hand: G1[i1] @ G2[i2] flattened row-major over (j1, j2)
    torch.manual_seed(0)
    cores = [torch.randn(3, 1, 2, 4, dtype=torch.float64), torch.randn(5, 4, 3, 1, dtype=torch.float64)]
    table = full_table(cores)
    i1, i2 = 2, 3
    row = (cores[0][i1, 0] @ cores[1][i2].reshape(4, 3)).reshape(-1)  # [q1, r] @ [r, q2]
    torch.testing.assert_close(table[i1 * 5 + i2], row)
    assert table.shape == (15, 6)


def test_prefix_plan_lists_each_distinct_prefix_once():
    rows = torch.tensor([0, 1, 7, 8, 29, 30, 59])  # p = (3, 4, 5): prefixes of length 1 and 2
    plan = prefix_plan(rows, (3, 4, 5))
    expected_l2 = sorted({int(r) // 5 for r in rows})
    expected_l1 = sorted({int(r) // 20 for r in rows})
    assert plan.sizes == [len(expected_l1), len(expected_l2), rows.numel()]
    assert plan.digits[0].tolist() == expected_l1
    assert plan.digits[1].tolist() == [v % 4 for v in expected_l2]
    assert plan.digits[2].tolist() == [int(r) % 5 for r in rows]
    # parent links point at the right prefixes
    assert [expected_l2[i] for i in plan.parents[2].tolist()] == [int(r) // 5 for r in rows]
    assert [expected_l1[i] for i in plan.parents[1].tolist()] == [v // 4 for v in expected_l2]


@pytest.mark.parametrize("shape", SHAPES)
def test_contract_backward_equals_autograd(shape):
    p, q, r, n = shape
    torch.manual_seed(1)
    cfg = TTConfig(n, p, q, r)
    cores = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in cfg.core_shapes]
    rows = torch.unique(torch.randint(0, n, (30,)))
    plan = prefix_plan(rows, p)
    out = contract(cores, plan)
    g = torch.randn_like(out)
    expected = torch.autograd.grad((out * g).sum(), cores)
    levels = contract([c.detach() for c in cores], plan, keep_levels=True)
    got = contract_backward([c.detach() for c in cores], plan, levels, g)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_functional_lookups_agree_on_empty_and_single_batches():
    torch.manual_seed(2)
    cfg = TTConfig(20, (4, 5), (2, 3), (3,))
    cores = [torch.randn(s) for s in cfg.core_shapes]
    for rows in (torch.tensor([], dtype=torch.int64), torch.tensor([7])):
        ref = lookup_plain(cores, rows, cfg.p_shapes)
        for dedup, reuse in itertools.product((False, True), (False, True)):
            if reuse and not dedup:
                continue
            torch.testing.assert_close(lookup(cores, rows, cfg.p_shapes, dedup, reuse), ref)
