import pytest
import torch

from gnnkit.models.node_gnn import NodeGNN, resolve_model
from gnnkit.step_profile import SYNC_WARNING


@pytest.mark.parametrize("model", ["gcn", "sage", "gat", "mlp"])
def test_forward_shapes_and_gradients(model):
    torch.manual_seed(0)
    net = NodeGNN(model, 8, 16, 3, num_layers=3, heads=2 if model == "gat" else 1)
    x = torch.randn(30, 8)
    edge_index = torch.randint(0, 30, (2, 90))
    out = net(x, edge_index)
    assert out.shape == (30, 3)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_repr_echoes_arguments():
    assert str(NodeGNN("sage", 8, 16, 3)) == "NodeGNN(sage, 8, 16, 3, num_layers=3, dropout=0.5, batch_norm=True)"


def test_resolver_normalises_and_explains():
    assert resolve_model("GraphSAGE") == "sage" and resolve_model("G-C-N") == "gcn"
    with pytest.raises(ValueError, match=r"Could not resolve model 'gcn2' among choices \['gat', 'gcn', 'gin', 'mlp', 'sage'\]"):
        resolve_model("gcn2")


def test_mlp_ignores_edges():
    torch.manual_seed(0)
    net = NodeGNN("mlp", 4, 8, 2, num_layers=2).eval()
    x = torch.randn(10, 4)
    assert torch.equal(net(x, torch.zeros(2, 0, dtype=torch.long)), net(x, torch.randint(0, 10, (2, 40))))


def _sampled_batch():
    """A 3-hop batch of gnnkit's sampler over a random 300-node graph with 8 features."""
    import torch_geometric

    from gnnkit.data.sampler import neighbor_loader

    torch.manual_seed(0)
    n = 300
    edge_index = torch.randint(0, n, (2, 3000))
    indptr_order = edge_index[1].argsort()
    src, dst = edge_index[0][indptr_order], edge_index[1][indptr_order]
    indptr = torch.zeros(n + 1, dtype=torch.long)
    indptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    data = torch_geometric.data.Data(x=torch.randn(n, 8), num_nodes=n)
    loader = neighbor_loader(data, indptr, src, [4, 3, 2], input_nodes=None, batch_size=16, shuffle=False, seed=0)
    return next(iter(loader))


@pytest.mark.parametrize("model,aggregation", [("sage", "pyg"), ("gat", "pyg"), ("gin", "pyg"), ("sage", "gnnkit"),
                                               ("gin", "gnnkit")])
def test_trimming_per_hop_keeps_the_seed_outputs(model, aggregation):
    """Layer i reads the batch less its outer i hops and computes only the rows layer i + 1 reads;
    the seeds' logits and the parameters' gradients do not change."""
    batch = _sampled_batch()
    gnn = NodeGNN(model, 8, 16, 5, num_layers=3, aggregation=aggregation).eval()
    full = gnn(batch.x, batch.edge_index)[: batch.batch_size]
    full.square().sum().backward()
    full_grads = [p.grad.clone() for p in gnn.parameters()]
    gnn.zero_grad()
    trimmed = gnn(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
                  num_sampled_edges=batch.num_sampled_edges)
    assert trimmed.size(0) == batch.batch_size
    torch.testing.assert_close(trimmed, full, rtol=1e-4, atol=1e-5)
    trimmed.square().sum().backward()
    for p, expected in zip(gnn.parameters(), full_grads):
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model,format", [("sage", "auto"), ("gin", "auto"), ("sage", "gather_scatter"),
                                          ("gcn", "auto")])
def test_blocks_sliced_from_one_row_pointer_give_the_checked_blocks_results(model, format, monkeypatch):
    """The sampler's edges come sorted by destination (the batch says so): the gnnkit blocks made
    from one row pointer, without checks (no checked construction is asked for), give the logits and
    gradients of the checked ones (GCN, untrimmed: the whole batch's matrix)."""
    from gnnkit.sparse import Adjacency

    batch = _sampled_batch()
    dst = batch.edge_index[1]
    assert batch.edges_by_destination and bool((dst[1:] >= dst[:-1]).all())
    gnn = NodeGNN(model, 8, 16, 5, num_layers=3, aggregation="gnnkit", format=format).eval()
    sizes = {"num_sampled_nodes": batch.num_sampled_nodes, "num_sampled_edges": batch.num_sampled_edges}
    results = []
    for by_destination in (False, True):
        if by_destination:
            monkeypatch.setattr(Adjacency, "from_edge_index", classmethod(
                lambda cls, *a, **k: pytest.fail("a checked block was built from sorted edges")))
        gnn.zero_grad()
        out = gnn(batch.x, batch.edge_index, edges_by_destination=by_destination, **sizes)
        out.square().sum().backward()
        results.append((out, [p.grad.clone() for p in gnn.parameters()]))
    (checked, checked_grads), (sliced, sliced_grads) = results
    torch.testing.assert_close(sliced, checked)
    for a, b in zip(sliced_grads, checked_grads):
        torch.testing.assert_close(a, b)


def test_gcn_is_not_trimmed():
    """GCN's normalisation uses source degrees, which trimming would change."""
    gnn = NodeGNN("gcn", 4, 8, 3, num_layers=2).eval()
    x, edge_index = torch.randn(10, 4), torch.tensor([[1, 2, 3, 4, 5], [0, 0, 1, 2, 3]])
    trimmed = gnn(x, edge_index, num_sampled_nodes=[1, 2, 7], num_sampled_edges=[2, 3])
    torch.testing.assert_close(trimmed, gnn(x, edge_index))


def test_gat_paper_options_reach_its_layers():
    """GAT's settings (arXiv 1710.10903): 8 heads x 8 hidden concatenated, output heads averaged,
    dropout on the attention coefficients."""
    from torch_geometric.nn import GATConv

    net = NodeGNN("gat", 8, 64, 3, num_layers=2, heads=8, output_heads=4, attention_dropout=0.6, activation="elu")
    hidden, out = net.layers
    assert isinstance(hidden, GATConv) and (hidden.heads, hidden.out_channels, hidden.concat) == (8, 8, True)
    assert isinstance(out, GATConv) and (out.heads, out.out_channels, out.concat) == (4, 3, False)
    assert hidden.dropout == out.dropout == 0.6
    x, edge_index = torch.randn(20, 8), torch.randint(0, 20, (2, 60))
    assert net.eval()(x, edge_index).shape == (20, 3)
    assert "heads=8, output_heads=4, attention_dropout=0.6" in str(net) and "activation=elu" in str(net)


def test_elu_activation_between_layers():
    torch.manual_seed(0)
    net = NodeGNN("mlp", 4, 8, 2, num_layers=2, activation="elu", batch_norm=False).eval()
    x = torch.randn(10, 4)
    first, second = net.layers
    assert torch.allclose(net(x, torch.zeros(2, 0, dtype=torch.long)), second(torch.nn.functional.elu(first(x))))


def test_input_dropout_drops_features_in_training_only():
    torch.manual_seed(0)
    x, no_edges = torch.randn(50, 6), torch.zeros(2, 0, dtype=torch.long)
    plain = NodeGNN("mlp", 6, 8, 3, num_layers=1).train()
    assert torch.equal(plain(x, no_edges), plain.eval()(x, no_edges))  # one layer: no dropout at all
    dropped = NodeGNN("mlp", 6, 8, 3, num_layers=1, input_dropout=0.5)
    dropped.load_state_dict(plain.state_dict())
    assert not torch.allclose(dropped.train()(x, no_edges), plain(x, no_edges))
    assert torch.equal(dropped.eval()(x, no_edges), plain(x, no_edges))


def test_options_are_checked():
    with pytest.raises(ValueError, match=r"activation: expected one of \['relu', 'elu', 'gelu'\], got 'tanh'"):
        NodeGNN("gcn", 4, 8, 2, activation="tanh")
    with pytest.raises(ValueError, match="input_dropout: expected a probability"):
        NodeGNN("gcn", 4, 8, 2, input_dropout=1.0)
    with pytest.raises(ValueError, match="not divisible by heads 3"):
        NodeGNN("gat", 4, 8, 2, num_layers=2, heads=3)
    with pytest.raises(ValueError, match="output_heads: expected at least 1 attention head, got 0"):
        NodeGNN("gat", 4, 8, 2, output_heads=0)
    with pytest.raises(ValueError, match="output_heads: the residual stack ends in a linear map"):
        NodeGNN("gat", 4, 8, 2, residual=True, output_heads=4)
    with pytest.raises(ValueError, match="layer_norm: LayerNorm replaces BatchNorm; set batch_norm: false as well"):
        NodeGNN("gcn", 4, 8, 2, layer_norm=True)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "mlp"])
def test_residual_stack_is_platonov_et_al_s(model):
    """The residual stack computes, written out by hand as their code's ``Model`` does it: the input
    map, then per layer ``h + ff(act(layer(norm(h))))``, then the output norm and map (evaluation:
    no dropout); every parameter gets a gradient."""
    torch.manual_seed(0)
    net = NodeGNN(model, 6, 16, 3, num_layers=3, residual=True, batch_norm=False, layer_norm=True,
                  activation="gelu", dropout=0.2, heads=2 if model == "gat" else 1).eval()
    x, edge_index = torch.randn(25, 6), torch.randint(0, 25, (2, 80))
    gelu = torch.nn.functional.gelu
    h = gelu(net.stream.input(x))
    for layer, norm, ff in zip(net.layers, net.norms, net.stream.feed_forwards):
        update = layer(norm(h)) if model == "mlp" else layer(norm(h), edge_index)
        h = h + ff(gelu(update))
    expected = net.stream.output(net.norms[-1](h))
    out = net(x, edge_index)
    torch.testing.assert_close(out, expected)
    assert len(net.norms) == 4 and all(isinstance(n, torch.nn.LayerNorm) for n in net.norms)
    net.train()(x, edge_index).square().sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert "layer_norm=True, residual=True" in str(net) and "activation=gelu" in str(net)


@pytest.mark.parametrize("aggregation", ["pyg", "gnnkit"])
def test_residual_stack_trimmed_per_hop_keeps_the_seed_outputs(aggregation):
    """A sampled block's residual adds the stream's destination rows (its first rows)."""
    batch = _sampled_batch()
    gnn = NodeGNN("sage", 8, 16, 5, num_layers=3, aggregation=aggregation, residual=True, batch_norm=False,
                  layer_norm=True).eval()
    full = gnn(batch.x, batch.edge_index)[: batch.batch_size]
    trimmed = gnn(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
                  num_sampled_edges=batch.num_sampled_edges, edges_by_destination=aggregation == "gnnkit")
    assert trimmed.size(0) == batch.batch_size
    torch.testing.assert_close(trimmed, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_input_aggregated_once_gives_the_same_logits_and_gradients(model):
    """The first layer started from ``Â X`` (GCN) or ``[mean of neighbours, own row]`` (SAGE)."""
    from gnnkit.sparse import Adjacency, spmm
    from gnnkit.sparse.normalize import gcn_normalized

    torch.manual_seed(0)
    net = NodeGNN(model, 8, 16, 3, num_layers=3, dropout=0.0, aggregation="gnnkit", format="csr")
    x = torch.randn(40, 8)
    adj = Adjacency.from_edge_index(torch.randint(0, 40, (2, 160)), 40)
    aggregated = (spmm(gcn_normalized(adj), x) if model == "gcn"
                  else torch.cat([spmm(adj, x, reduce="mean"), x], dim=1))
    grads = []
    for inputs, flag in ((x, False), (aggregated, True)):
        net.zero_grad()
        out = net(inputs, None, adj=adj, input_aggregated=flag)
        out.square().sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in net.parameters()]))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(grads[0][1], grads[1][1]))


def test_input_aggregation_is_refused_where_the_first_layer_cannot_start_from_it():
    assert NodeGNN("sage", 8, 16, 3, aggregation="gnnkit").input_aggregation() == "mean"
    with pytest.raises(ValueError, match="data.aggregate_input: needs model gcn or sage with aggregation gnnkit"):
        NodeGNN("gin", 8, 16, 3, aggregation="gnnkit").input_aggregation()
    with pytest.raises(ValueError, match="data.aggregate_input: needs model gcn or sage"):
        NodeGNN("gcn", 8, 16, 3).input_aggregation()  # PyG's layers
    with pytest.raises(ValueError, match=r"must not be dropped out \(model.input_dropout 0.2\)"):
        NodeGNN("gcn", 8, 16, 3, aggregation="gnnkit", input_dropout=0.2).input_aggregation()
    with pytest.raises(ValueError, match="with model.residual the first layer reads a linear map of the features"):
        NodeGNN("sage", 8, 16, 3, aggregation="gnnkit", residual=True).input_aggregation()


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["sage", "gin", "gcn"])
def test_a_sampled_step_on_the_gpu_waits_for_it_at_most_once(model):
    """Once a batch's size class is planned, a sampled training step of gnnkit's layers (forward and
    backward, format auto) reads nothing back from the GPU; GCN, whose whole-batch normalisation
    drops existing self-loops, reads back how many entries stay (torch's sync debug mode counts)."""
    import warnings

    batch = _sampled_batch().to("cuda")
    gnn = NodeGNN(model, 8, 16, 5, num_layers=3, aggregation="gnnkit", format="auto", dropout=0.0).cuda()
    sizes = {"num_sampled_nodes": batch.num_sampled_nodes, "num_sampled_edges": batch.num_sampled_edges,
             "edges_by_destination": True}

    def step() -> None:
        gnn(batch.x, batch.edge_index, **sizes)[: batch.batch_size].square().sum().backward()

    step()  # plans the size class
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in seen if SYNC_WARNING in str(w.message)]
    assert len(syncs) <= (1 if model == "gcn" else 0), syncs


@pytest.mark.gpu
def test_a_16_bit_sampled_step_on_the_gpu_plans_its_own_size_classes():
    """In bfloat16 on a GPU, format auto plans (and without a CUDA model, times) a sampled batch's
    size classes in bfloat16, apart from float32's, and the seeds' logits follow float32's."""
    batch = _sampled_batch().to("cuda")
    sizes = {"num_sampled_nodes": batch.num_sampled_nodes, "num_sampled_edges": batch.num_sampled_edges,
             "edges_by_destination": True}
    gnn = NodeGNN("sage", 8, 16, 5, num_layers=3, aggregation="gnnkit", format="auto", dropout=0.0).cuda()
    full = gnn(batch.x, batch.edge_index, **sizes)[: batch.batch_size]
    half = gnn.to(torch.bfloat16)
    out = half(batch.x.to(torch.bfloat16), batch.edge_index, **sizes)[: batch.batch_size]
    out.float().square().sum().backward()
    keys = [key for layer in half.layers if hasattr(layer, "plans") for key in layer.plans._plans]
    assert {torch.float32, torch.bfloat16} <= {part for key in keys for part in key if isinstance(part, torch.dtype)}
    torch.testing.assert_close(out.float(), full.detach(), atol=0.1, rtol=0.05)
