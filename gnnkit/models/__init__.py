"""GNN architectures for node classification."""

from gnnkit.models.node_gnn import MODELS, NodeGNN

__all__ = ["MODELS", "NodeGNN"]
