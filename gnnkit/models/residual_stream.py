"""The linear maps around a pre-norm residual stack of message-passing layers.

Platonov et al., "A critical look at the evaluation of GNNs under heterophily: Are we really making
progress?" (ICLR 2023, <https://arxiv.org/abs/2302.11640>) find standard GNNs strong on
heterophilous graphs once they are trained as their code's ``Model`` stacks them: a linear map of
the features to the hidden width, then per layer ``h = h + module(norm(h))`` where a module is the
layer's aggregation followed by a two-layer feed-forward network, then a norm and a linear map to
the outputs. PyG's ``SAGEConv`` (``W1 x + W2 mean(x_j)``) and ``GCNConv`` (``Â X W``) are their SAGE
and GCN modules' first linear map applied to the aggregate, so a block here is the layer, then
dropout, the activation, one more linear map and dropout.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from gnnkit.models.dropout import dropout


class ResidualStream(nn.Module):
    """The input map, each block's second linear map and the output map of a residual stack.

    The stack's layers and norms stay with the model (:class:`~gnnkit.models.node_gnn.NodeGNN`),
    which calls :meth:`enter` once, :meth:`add` after each layer and :attr:`output` last.

    Args:
        in_channels: Input feature width.
        hidden_channels: Width of the stream (every layer maps it to itself).
        out_channels: Output width.
        num_layers: Number of blocks.
        activation: Applied after the input map and inside each block.
        p: Dropout probability after the input map and twice in each block.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                 activation: Callable[[Tensor], Tensor], p: float) -> None:
        super().__init__()
        self.input = nn.Linear(in_channels, hidden_channels)
        self.feed_forwards = nn.ModuleList(nn.Linear(hidden_channels, hidden_channels) for _ in range(num_layers))
        self.output = nn.Linear(hidden_channels, out_channels)
        self.activation = activation
        self.p = p

    def reset_parameters(self) -> None:
        for linear in [self.input, *self.feed_forwards, self.output]:
            linear.reset_parameters()

    def enter(self, x: Tensor) -> Tensor:
        """The stream's start: ``act(dropout(input(x)))``, as the reference orders them."""
        return self.activation(dropout(self.input(x), self.p, self.training))

    def add(self, i: int, stream: Tensor, update: Tensor) -> Tensor:
        """Block ``i``'s output: the stream's first ``len(update)`` rows (a sampled block's
        destinations come first) plus ``dropout(linear(act(dropout(update))))``.

        Args:
            i: The block's index.
            stream: The stream before the block, ``[N_src, hidden]``.
            update: The block's layer applied to the normalised stream, ``[N_dst, hidden]``.
        """
        update = self.activation(dropout(update, self.p, self.training))
        update = dropout(self.feed_forwards[i](update), self.p, self.training)
        return stream[: update.size(0)] + update
