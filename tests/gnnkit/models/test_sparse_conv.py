import copy

import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, GINConv, SAGEConv

from gnnkit.models.node_gnn import NodeGNN
from gnnkit.models.sparse_conv import SparseGCNConv, SparseGINConv, SparseSAGEConv
from gnnkit.sparse import FORMATS, Adjacency
from gnnkit.sparse.normalize import gcn_normalized


def graph(n: int = 40, e: int = 160, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n - 5, (2, e), generator=g)  # last 5 nodes isolated
    extra = torch.tensor([[3, 3, 7, 1, 1], [3, 3, 7, 2, 2]])  # repeated self-loops and a duplicate edge
    return torch.cat([ei, extra], 1)


def pair(kind: str, fmt: str) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    if kind == "gcn":
        ref, ours = GCNConv(8, 6), SparseGCNConv(8, 6, format=fmt)
    elif kind == "sage":
        ref, ours = SAGEConv(8, 6), SparseSAGEConv(8, 6, format=fmt)
    else:
        mlp = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 6))
        ref, ours = GINConv(mlp), SparseGINConv(nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 6)), format=fmt)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize("fmt", ["auto", *sorted(FORMATS)])
@pytest.mark.parametrize("kind", ["gcn", "sage", "gin"])
def test_layers_match_pyg_values_and_gradients(kind, fmt):
    ei = graph()
    adj = Adjacency.from_edge_index(ei, 40)
    ref, ours = pair(kind, fmt)
    x = torch.randn(40, 8, requires_grad=True)
    out_ref = ref(x, ei)
    (g_ref,) = torch.autograd.grad(out_ref.square().sum(), x)
    out = ours(x, adj)
    (g,) = torch.autograd.grad(out.square().sum(), x)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)
    assert ours.last_plan is not None
    if fmt != "auto":
        assert (ours.last_plan.forward, ours.last_plan.backward) == (fmt, fmt)


def test_sage_on_a_rectangular_sampled_block_matches_pyg():
    g = torch.Generator().manual_seed(1)
    ei = torch.stack([torch.randint(0, 30, (80,), generator=g), torch.randint(0, 10, (80,), generator=g)])
    ref, ours = pair("sage", "csr")
    x = torch.randn(30, 8)
    adj = Adjacency.from_edge_index(ei, 30, num_dst=10)
    torch.testing.assert_close(ours(x, adj), ref((x, x[:10]), ei), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_normalisation_matches_pyg_and_is_cached(weighted):
    """Existing self-loops give way to one loop a node, keeping an existing loop's weight (the last
    of repeated ones, as PyG's ``add_remaining_self_loops``)."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    ei = graph()
    weights = torch.rand(ei.size(1), generator=torch.Generator().manual_seed(1)) + 0.5 if weighted else None
    adj = Adjacency.from_edge_index(ei, 40, values=weights)
    norm = gcn_normalized(adj)
    assert gcn_normalized(adj) is norm
    index, weight = gcn_norm(ei, weights, 40)
    expected = torch.zeros(40, 40).index_put_((index[1], index[0]), weight, accumulate=True)
    torch.testing.assert_close(norm.to_dense(), expected)


@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
def test_node_gnn_gnnkit_aggregation_equals_pyg_aggregation(model):
    torch.manual_seed(0)
    ref = NodeGNN(model, 8, 16, 3, num_layers=3).eval()
    ours = NodeGNN(model, 8, 16, 3, num_layers=3, aggregation="gnnkit", format="auto").eval()
    ours.load_state_dict(ref.state_dict())
    ei = graph()
    x = torch.randn(40, 8)
    adj = Adjacency.from_edge_index(ei, 40)
    torch.testing.assert_close(ours(x, ei, adj=adj), ref(x, ei), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours(x, ei), ref(x, ei), atol=1e-4, rtol=1e-4)  # adjacency built from edges
    report = ours.format_report()
    assert sorted(report) == ["layer0", "layer1", "layer2"]
    assert all(r["forward"] in FORMATS and r["backward"] in FORMATS for r in report.values())
    widths = [r["width"] for r in report.values()]
    assert widths == ([16, 16, 3] if model == "gcn" else [8, 16, 16])  # GCN aggregates after its linear map
    assert ref.format_report() == {}


def test_node_gnn_honours_a_forced_format_and_trains():
    torch.manual_seed(0)
    net = NodeGNN("sage", 8, 16, 3, num_layers=2, aggregation="gnnkit", format="segment")
    x, ei = torch.randn(40, 8), graph()
    net(x, ei).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert {(r["forward"], r["backward"], r["source"]) for r in net.format_report().values()} == {
        ("segment", "segment", "forced")}


@pytest.mark.parametrize("fmt", ["auto", "csr", "native_csr"])
@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
def test_node_gnn_trains_under_bfloat16_autocast(model, fmt):
    """bf16-mixed training (``--trainer.precision bf16-mixed``) on the CPU: the layers hand bfloat16
    features to formats whose CPU kernels take float32 only (MKL CSR, gnnkit's), which multiply in
    float32 instead of failing."""
    torch.manual_seed(0)
    net = NodeGNN(model, 8, 16, 3, num_layers=2, aggregation="gnnkit", format=fmt)
    x, ei = torch.randn(40, 8), graph()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x, ei)
    out.float().square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


def test_reprs_and_errors():
    assert repr(SparseGCNConv(8, 16)) == "SparseGCNConv(8, 16, format=auto)"
    assert repr(SparseSAGEConv(8, 16, format="CSR")) == "SparseSAGEConv(8, 16, format=csr)"
    assert repr(SparseGINConv(nn.Linear(2, 2), format="gs")).startswith("SparseGINConv(nn=Linear(")
    assert str(NodeGNN("gin", 8, 16, 3, aggregation="gnnkit")) == (
        "NodeGNN(gin, 8, 16, 3, num_layers=3, dropout=0.5, batch_norm=True, aggregation=gnnkit, format=auto)")
    with pytest.raises(ValueError, match="Could not resolve format 'fast'"):
        SparseSAGEConv(8, 16, format="fast")
    with pytest.raises(ValueError, match="aggregation='gnnkit' supports gcn, sage and gin"):
        NodeGNN("gat", 8, 16, 3, aggregation="gnnkit")
    with pytest.raises(ValueError, match="Could not resolve aggregation 'dgl'"):
        NodeGNN("gcn", 8, 16, 3, aggregation="dgl")


def block(seed: int, num_dst: int = 10, num_src: int = 30, nnz: int = 80) -> Adjacency:
    g = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, num_src, (nnz,), generator=g), torch.randint(0, num_dst, (nnz,), generator=g)])
    return Adjacency.from_edge_index(ei, num_src, num_dst=num_dst, single_use=True)


def test_single_use_blocks_are_planned_once_per_size_class(monkeypatch):
    """The selector (matrix features, host read-backs on a GPU) runs for the first block of a size
    class only; the next blocks take its plan, values stay exact, and another size class or a matrix
    that serves many products is planned anew."""
    from gnnkit.sparse import features

    computed = []
    real = features.matrix_features
    monkeypatch.setattr(features, "matrix_features", lambda adj: computed.append(adj) or real(adj))
    monkeypatch.setattr("gnnkit.sparse.selector.matrix_features", features.matrix_features)
    ref, ours = pair("sage", "auto")
    blocks = [block(seed) for seed in range(5)]
    for adj in blocks:
        x = torch.randn(30, 8)
        torch.testing.assert_close(ours(x, adj), ref((x, x[:10]), torch.stack([adj.indices, adj.rows()])),
                                   atol=1e-5, rtol=1e-4)
    assert {id(a) for a in computed} == {id(blocks[0])} and len(ours.plans) == 1  # for A and A^T
    assert ours.plan_counts.total() == 5 and ours.last_plan.source == "selector"
    ours(torch.randn(300, 8), block(9, num_dst=100, num_src=300, nnz=900))  # another size class
    assert len({id(a) for a in computed}) == 2 and len(ours.plans) == 2
    full = Adjacency.from_edge_index(graph(), 40)  # serves many products: its own plan, cached on it
    ours(torch.randn(40, 8), full)
    assert computed[-1] is full and len(ours.plans) == 2 and any(k.startswith("plan:") for k in full.cached_keys())


def test_without_a_model_a_size_class_is_timed_once_and_keeps_the_fastest_format(monkeypatch):
    """On a device kind without a selector model (CUDA until one is calibrated) the first block of a
    size class has the usable formats timed on it, forward and backward (there with the transpose's
    sort counted where a format needs it), in the features' dtype, the fastest beyond noise serves
    the class's next blocks untimed, and values and gradients stay those of the reference."""
    from gnnkit.sparse import decision
    from gnnkit.sparse import selector as selector_module
    from gnnkit.sparse.measure import FormatTiming

    monkeypatch.setitem(selector_module.SHIPPED_MODELS, "cpu", selector_module.SHIPPED_MODEL.with_name("absent.json"))
    monkeypatch.delenv("GNNKIT_SELECTOR", raising=False)
    timed = []

    def timer(adj, width, names, repeats, dtype=torch.float32):
        timed.append((adj, list(names)))
        dtypes.append(dtype)
        return {n: FormatTiming(0.0, 0.2 if n == "segment" else 1.0, repeats) for n in names}

    def backward_timer(adj, width, names, repeats, dtype=torch.float32):
        timed_backward.append((adj, list(names)))
        dtypes.append(dtype)
        return {n: 0.5 if n == "csr" else 1.0 for n in names}

    timed_backward, dtypes = [], []
    monkeypatch.setattr(decision, "_timer", timer)
    monkeypatch.setattr(decision, "_backward_timer", backward_timer)
    ref, ours = pair("sage", "auto")
    blocks = [block(seed) for seed in range(4)]
    for adj in blocks:
        x = torch.randn(30, 8, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        out, expected = ours(x, adj), ref((x_ref, x_ref[:10]), torch.stack([adj.indices, adj.rows()]))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
        out.square().sum().backward()
        expected.square().sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-4)
    # once a class: every usable format, then the switch's two again to confirm it
    assert [adj for adj, _ in timed] == [adj for adj, _ in timed_backward] == [blocks[0]] * 2
    assert "segment" in timed[0][1] and "csr" in timed[0][1] and timed[0][1] == timed_backward[0][1]
    assert timed[1][1] == [selector_module.NO_MODEL_DEFAULT, "segment"] and timed_backward[1][1] == ["gather_scatter", "csr"]
    assert all(FORMATS[n].conversion_free for n in timed[0][1])  # single-use: nothing to convert
    assert (ours.last_plan.forward, ours.last_plan.backward) == ("segment", "csr")  # csr: A^T sorted a step
    assert ours.plan_counts == {"segment/csr": 4}
    ours(torch.randn(300, 8), block(9, num_dst=100, num_src=300, nnz=900))  # another size class: timed too
    assert len(timed) == len(timed_backward) == 4 and set(dtypes) == {torch.float32}
    half = copy.deepcopy(ours).to(torch.bfloat16)  # its plans too: the class is planned, but for float32
    half(torch.randn(300, 8, dtype=torch.bfloat16), block(9, num_dst=100, num_src=300, nnz=900))
    assert len(timed) == len(timed_backward) == 6 and dtypes[-4:] == [torch.bfloat16] * 4  # timed in its dtype
    monkeypatch.setenv(decision.VERIFY_ENV, "0")  # the check turned off: the defaults, untimed
    ours(torch.randn(3000, 8), block(9, num_dst=1000, num_src=3000, nnz=9000))
    assert len(timed) == len(timed_backward) == 6
    assert (ours.last_plan.forward, ours.last_plan.backward) == (selector_module.NO_MODEL_DEFAULT, "gather_scatter")


def test_the_selector_never_passes_over_a_single_use_matrix_for_a_format_it_cannot_use(monkeypatch):
    """Formats that need a conversion are ruled out for single-use matrices before their
    applicability check, which for BSR counts the matrix's blocks."""
    from gnnkit.sparse.formats import bsr
    from gnnkit.sparse.selector import usable

    monkeypatch.setattr(bsr, "count_blocks", lambda *a: pytest.fail("BSR counted a single-use matrix's blocks"))
    assert not usable(FORMATS["bsr4"], block(0)) and not usable(FORMATS["bsr16"], block(0))
    assert usable(FORMATS["csr"], block(0))


@pytest.mark.parametrize("layer", [SparseGCNConv(4, 2), SparseSAGEConv(4, 2), SparseGINConv(nn.Linear(4, 2))],
                         ids=lambda layer: type(layer).__name__)
def test_a_pyg_edge_index_or_too_many_destinations_is_one_line(layer):
    edge_index = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(TypeError, match=r"adj must be a gnnkit.sparse.Adjacency \(from a PyG edge_index: "
                                        r"Adjacency.from_edge_index"):
        layer(torch.randn(2, 4), edge_index)
    wide = Adjacency.from_edge_index(torch.tensor([[0, 1], [3, 4]]), num_nodes=2, num_dst=5)
    with pytest.raises(ValueError, match="more destination rows than x has nodes"):
        layer(torch.randn(2, 4), wide)
