"""gnnkit: train GNNs on OGB graphs with PyTorch Lightning.

Importing the package registers ``GnnkitStrategy`` (``"gnnkit"``, ``"gnnkit_<mode>"``) with
Lightning's ``StrategyRegistry``.
"""

from gnnkit.comm import strategy as _comm_strategy  # noqa: F401  (registers the strategies)
