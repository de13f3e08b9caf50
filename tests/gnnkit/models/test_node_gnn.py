import pytest
import torch

from gnnkit.models.node_gnn import NodeGNN, resolve_model


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
