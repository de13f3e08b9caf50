"""InRank: a linear layer ``W = U V^T`` whose rank grows while the spectrum of ``W`` asks for it.

Zhao et al., "InRank: Incremental Low-Rank Learning", <https://arxiv.org/abs/2306.11250>. The
layer follows the authors' efficient variant (``InRankEfficient`` in jiaweizzhao/InRank): the whole
weight is the product of two factors, of which the layer applies the first ``rank + buffer`` modes
(the ``buffer`` modes beyond the current rank train too, so that a new direction can show in the
spectrum before it is counted). Every ``gap`` optimizer steps after ``warmup`` steps
(:meth:`InRankLinear.step`, which :class:`~gnnkit.module.NodeClassifier` calls after each training
batch), the singular values ``s`` of the applied weight give the new rank: the smallest ``k`` in
``[rank, min(rank + buffer, max_rank - buffer)]`` whose explained ratio exceeds ``threshold``, or
the largest one when none does (:func:`next_rank`). The explained ratio is the reference code's
``1 - var(s - s_k) / var(s)``, ``s_k`` keeping the top ``k`` singular values and zeroing the rest
(:func:`explained_ratio`). The rank never shrinks and stops at ``max_rank - buffer`` (so at most
``max_rank`` modes are applied); ``max_rank`` is ``max_rank_fraction * min(in, out)``, half in the
reference, or with ``max_params_fraction`` that fraction of the break-even rank ``in * out / (in +
out)``, which bounds the weight entries a layer trains against its dense counterpart's.

Defaults are the reference's GPT-2 settings (``configs/experiment/wt103/*in_rank_efficient*``):
initial rank 2, threshold 0.9, warm-up 200 and gap 25 iterations, half the smaller side as the
maximum rank; its buffer of 100 modes is sized for 768/3072-wide layers, so the default here is 8
for GNN widths (64 to 256). One difference from the reference: candidates run up to and including
``rank + buffer`` (the reference stops one short, so a buffer of one mode could never grow).

How the optimizer learns about new modes: both factors are allocated at ``max_rank`` from the start
(``u``: ``[out, max_rank]``, ``v``: ``[max_rank, in]``) and the forward pass slices the applied
modes. The optimizer therefore holds every parameter from its first step and never needs
rebuilding; unapplied modes get exactly zero gradients, so Adam's moments for them stay zero and
they do not move (weight decay aside) until they are applied. Modes beyond the initial ones start
with a zero ``u`` column, so growing the rank does not change the function (LoRA's trick,
<https://arxiv.org/abs/2106.09685>): the new modes begin at zero and learn from there. The memory
held is that of the maximum rank; :meth:`InRankLinear.num_params` counts the applied modes, which
is what the layer computes with (and what a model exported at its final rank would store).
``rank`` and ``steps`` are buffers, saved and restored with the model's ``state_dict``.

``frozen_base: true`` gives the paper's InRank proper instead of the efficient variant: the weight is
``W_0 + U V^T`` with ``W_0`` a frozen Glorot-uniform matrix that only its seed represents (it is
regenerated, never trained or stored) and ``U V^T`` the cumulative update, starting at zero; the
rank then follows the spectrum of the update, as in the paper's analysis. On Cora it generalised
better than the efficient variant at the same ranks (see the recipe's header).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.nn.dense.linear import Linear as PygLinear

from gnnkit import setting_checks


@dataclass(frozen=True)
class InRankOptions:
    """How InRank layers start, grow and stop (<https://arxiv.org/abs/2306.11250>).

    Args:
        init_rank: Initial rank (reference: 2).
        buffer: Extra modes applied beyond the rank, and the most the rank grows per check.
        threshold: Explained ratio the rank must reach (reference: 0.9).
        warmup: Optimizer steps before the first rank check (reference: 200).
        gap: Optimizer steps between rank checks (reference: 25).
        max_rank_fraction: Maximum applied rank as a fraction of ``min(in, out)`` (reference: 0.5).
        max_params_fraction: When set, caps the applied rank by weight entries instead: at most
            this fraction of the dense layer's ``in * out``, i.e. a rank of at most
            ``fraction * in * out / (in + out)`` (the break-even rank times the fraction), so every
            layer, and the model, trains at most that fraction of the dense weights.
        init_scale: Multiplies the initial factors (reference: 1.0); the product then has Glorot's
            variance ``2 / (in + out)`` times its square. With ``frozen_base`` only ``V`` starts
            non-zero, and its scale sets how fast the update ``U V^T`` moves: Adam moves ``U`` by
            about ``lr`` per entry, so ``U V^T`` moves in proportion to ``V``'s entries.
        frozen_base: The paper's InRank proper rather than its efficient variant: the weight is
            ``W_0 + U V^T``, ``W_0`` a frozen Glorot-uniform matrix regenerated from a stored seed
            (never trained, never stored) and ``U V^T`` the cumulative update, starting at zero
            (``U = 0``); the rank follows the update's spectrum.
    """

    init_rank: int = 2
    buffer: int = 8
    threshold: float = 0.9
    warmup: int = 200
    gap: int = 25
    max_rank_fraction: float = 0.5
    max_params_fraction: float | None = None
    init_scale: float = 1.0
    frozen_base: bool = False

    def __post_init__(self) -> None:
        for name, low in (("init_rank", 1), ("gap", 1), ("buffer", 0), ("warmup", 0)):
            setting_checks.at_least(f"inrank.{name}", getattr(self, name), low, f"an integer >= {low}")
        for name in ("threshold", "max_rank_fraction", "max_params_fraction"):
            if getattr(self, name) is not None or name != "max_params_fraction":
                setting_checks.fraction(f"inrank.{name}", getattr(self, name))
        setting_checks.positive_number("inrank.init_scale", self.init_scale)
        setting_checks.switch("inrank.frozen_base", self.frozen_base)

    @classmethod
    def of(cls, fields: InRankOptions | dict | None, where: str = "inrank") -> InRankOptions:
        """``fields`` as options: options as given, a dict's fields (the form the CLI and YAML give)
        or ``None`` for the defaults.

        Raises:
            ValueError: Naming an unknown field, or a value that is neither.
        """
        if isinstance(fields, cls):
            return fields
        if fields is not None and not isinstance(fields, dict):
            raise ValueError(f"{where}: expected InRankOptions or a dict of its fields, got {type(fields).__name__}")
        known = set(cls.__dataclass_fields__)
        if unknown := sorted(set(fields or {}) - known):
            raise ValueError(f"{where}: unknown fields {unknown}; expected some of {sorted(known)}")
        return cls(**(fields or {}))


def explained_ratio(s: Tensor, k: int) -> float:
    """The reference's explained ratio of the top ``k`` of singular values ``s`` (descending):
    ``1 - var(s - s_k) / var(s)``; 1 when ``k`` keeps them all or ``s`` is all zero, 0 for a
    truncated flat spectrum (``var(s) = 0``)."""
    if k >= s.numel() or not bool((s > 0).any()):
        return 1.0
    s = s.detach()
    residual = s.clone()
    residual[:k] = 0
    total = float(s.var())
    if total == 0.0:
        return 0.0
    return 1.0 - float(residual.var()) / total


def next_rank(s: Tensor, rank: int, buffer: int, max_rank: int, threshold: float) -> int:
    """The smallest ``k`` in ``[rank, min(rank + buffer, max_rank - buffer)]`` with
    ``explained_ratio(s, k) > threshold``, else the largest candidate; ``rank`` when none is left."""
    top = min(rank + buffer, max_rank - buffer)
    if top <= rank:
        return rank
    for k in range(rank, top + 1):
        if explained_ratio(s, k) > threshold:
            return k
    return top


def max_rank(in_features: int, out_features: int, options: InRankOptions) -> int:
    """Most modes a layer applies: ``max_params_fraction`` of the break-even rank
    ``in * out / (in + out)`` when set, else ``max_rank_fraction * min(in, out)``; at least 1."""
    if options.max_params_fraction is not None:
        cap = options.max_params_fraction * in_features * out_features / (in_features + out_features)
    else:
        cap = options.max_rank_fraction * min(in_features, out_features)
    return max(1, int(cap))


class InRankLinear(nn.Module):
    """``y = x V U^T + b`` with the first ``rank + buffer`` modes of ``U`` and ``V`` applied, the rank
    growing by :meth:`step` (<https://arxiv.org/abs/2306.11250>; see the module docstring).

    Args:
        in_features: Input width.
        out_features: Output width.
        bias: Learn an additive bias.
        options: Initial rank, buffer, threshold, schedule and maximum; default ``InRankOptions()``.
            A layer too small for them clamps its own: ``max_rank`` from :func:`max_rank`, rank
            ``<= max_rank``, buffer ``<= max_rank - rank``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 options: InRankOptions | None = None) -> None:
        super().__init__()
        for field, value in (("in_features", in_features), ("out_features", out_features)):
            setting_checks.at_least(f"InRankLinear.{field}", value, 1, "a width >= 1")  # 0 made a rank-1 layer
        self.options = opts = options or InRankOptions()
        self.in_features, self.out_features = in_features, out_features
        self.max_rank = max_rank(in_features, out_features, opts)
        self.init_rank = min(opts.init_rank, self.max_rank)
        self.buffer = min(opts.buffer, self.max_rank - self.init_rank)
        self.u = nn.Parameter(torch.empty(out_features, self.max_rank))
        self.v = nn.Parameter(torch.empty(self.max_rank, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.register_buffer("rank_", torch.tensor(self.init_rank))
        self.register_buffer("steps", torch.tensor(0))
        self.register_buffer("base_seed", torch.tensor(0))
        self._base: Tensor | None = None
        # Python mirrors of rank_ / steps, so forward and step read no tensor (a device sync on GPU)
        self._rank, self._steps = self.init_rank, 0
        self._unstepped_forwards = 0  # training passes before the first step(), to warn a script without one
        self.reset_parameters()

    @property
    def rank(self) -> int:
        """The current rank (the layer applies :attr:`applied_rank` modes)."""
        return self._rank

    @property
    def applied_rank(self) -> int:
        """Modes the forward pass applies: ``rank + buffer``, at most ``max_rank``."""
        return min(self.rank + self.buffer, self.max_rank)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Factors whose applied product has Glorot's variance (times ``init_scale^2``), zero ``u``
        columns beyond the initial modes, zero bias, initial rank, step count 0."""
        modes = min(self.init_rank + self.buffer, self.max_rank)
        std = (2.0 / (self.in_features + self.out_features) / modes) ** 0.25 * self.options.init_scale
        bound = math.sqrt(3.0) * std
        nn.init.uniform_(self.v, -bound, bound)
        nn.init.uniform_(self.u, -bound, bound)
        self.u[:, modes:] = 0.0
        if self.options.frozen_base:
            self.u.zero_()  # the cumulative update starts at zero
            self.base_seed.fill_(int(torch.randint(0, 2**62, ())))
            self._base = None
        if self.bias is not None:
            self.bias.zero_()
        self.rank_.fill_(self.init_rank)
        self.steps.zero_()
        self._rank, self._steps = self.init_rank, 0

    def base(self) -> Tensor | None:
        """The frozen ``W_0`` (``frozen_base``), Glorot-uniform from ``base_seed``; ``None`` otherwise.
        Regenerated (not stored) after loading a state dict or moving the layer."""
        if not self.options.frozen_base:
            return None
        if self._base is None or self._base.device != self.u.device or self._base.dtype != self.u.dtype:
            generator = torch.Generator().manual_seed(int(self.base_seed))
            bound = math.sqrt(6.0 / (self.in_features + self.out_features))
            base = torch.rand(self.out_features, self.in_features, generator=generator) * (2 * bound) - bound
            self._base = base.to(device=self.u.device, dtype=self.u.dtype)
        return self._base

    def _load_from_state_dict(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super()._load_from_state_dict(*args, **kwargs)
        self._base = None  # the loaded seed's W_0
        self._rank, self._steps = int(self.rank_), int(self.steps)

    def update(self) -> Tensor:
        """The low-rank part ``U_m V_m^T`` (``[out, in]``), whose spectrum sets the rank."""
        m = self.applied_rank
        return self.u[:, :m] @ self.v[:m]

    @property
    def weight(self) -> Tensor:
        """The dense ``[out, in]`` weight the layer applies: ``U_m V_m^T`` (plus ``W_0``)."""
        base = self.base()
        return self.update() if base is None else base + self.update()

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self._steps == 0 and torch.is_grad_enabled():
            self._count_unstepped()
        m = self.applied_rank
        out = F.linear(F.linear(x, self.v[:m]), self.u[:, :m], self.bias)
        base = self.base()
        return out if base is None else out + F.linear(x, base)

    def _count_unstepped(self) -> None:
        """Warn once when training has run past the first rank check without :meth:`step`: the rank
        then stays at ``init_rank``, silently, in a training loop that never calls it."""
        self._unstepped_forwards += 1
        if self._unstepped_forwards == self.options.warmup + self.options.gap + 1:
            warnings.warn(f"InRankLinear: {self._unstepped_forwards - 1} training passes and no step(), so the rank "
                          "stays at init_rank; call model.update_ranks() (NodeGNN) or each layer's step() after "
                          "every optimizer step (gnnkit's modules do)", stacklevel=3)

    @torch.no_grad()
    def step(self) -> bool:
        """Count one optimizer step; on a check step (after ``warmup``, every ``gap``) update the
        rank. Returns whether the rank grew."""
        self.steps += 1
        self._steps += 1
        steps = self._steps
        if steps <= self.options.warmup or steps % self.options.gap:
            return False
        return self.update_rank()

    @torch.no_grad()
    def update_rank(self) -> bool:
        """Set the rank from the applied weight's spectrum (:func:`next_rank`); whether it grew."""
        s = torch.linalg.svdvals(self.update().float())
        rank = next_rank(s, self.rank, self.buffer, self.max_rank, self.options.threshold)
        grew = rank > self.rank
        self.rank_.fill_(rank)
        self._rank = rank
        return grew

    def num_params(self) -> int:
        """Weight entries the layer applies: ``applied_rank * (in + out)`` (bias not counted)."""
        return self.applied_rank * (self.in_features + self.out_features)

    def full_params(self) -> int:
        """Weight entries of the dense layer it replaces: ``in * out``."""
        return self.in_features * self.out_features

    def extra_repr(self) -> str:
        return (f"{self.in_features}, {self.out_features}, rank={self.rank}, buffer={self.buffer}, "
                f"max_rank={self.max_rank}, bias={self.bias is not None}")


def _linear_shape(module: nn.Module) -> tuple[int, int, bool] | None:
    """``(in, out, bias)`` of a torch or PyG ``Linear``; ``None`` for anything else."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features, module.bias is not None
    if isinstance(module, PygLinear):
        if module.in_channels <= 0:
            raise ValueError("model.low_rank: a lazily initialised PyG Linear (in_channels=-1) cannot become InRank")
        return module.in_channels, module.out_channels, module.bias is not None
    return None


def replace_linears(module: nn.Module, options: InRankOptions, prefix: str = "") -> dict[str, InRankLinear]:
    """Replace every ``nn.Linear`` and PyG ``Linear`` inside ``module`` (GCNConv's ``lin``,
    SAGEConv's ``lin_l``/``lin_r``, GATConv's ``lin``, GIN's MLP layers, the MLP baseline's layers)
    by a freshly initialised :class:`InRankLinear` of the same shape and bias; returns them by
    dotted name."""
    replaced: dict[str, InRankLinear] = {}
    for name, child in list(module.named_children()):
        full = f"{prefix}{name}"
        shape = _linear_shape(child)
        if shape is None:
            replaced.update(replace_linears(child, options, prefix=f"{full}."))
            continue
        layer = InRankLinear(*shape, options=options)
        setattr(module, name, layer)
        replaced[full] = layer
    return replaced


def inrank_layers(module: nn.Module) -> Iterator[tuple[str, InRankLinear]]:
    """The :class:`InRankLinear` layers inside ``module``, by dotted name."""
    for name, child in module.named_modules():
        if isinstance(child, InRankLinear):
            yield name, child


def describe_low_rank(module: nn.Module) -> dict[str, object]:
    """``{"ranks": {name: applied rank}, "max_ranks": {...}, "params", "full_params"}`` of the InRank
    layers in ``module``: weight entries applied, and those of the dense layers they replace."""
    layers = dict(inrank_layers(module))
    return {
        "ranks": {name: layer.applied_rank for name, layer in layers.items()},
        "max_ranks": {name: layer.max_rank for name, layer in layers.items()},
        "params": sum(layer.num_params() for layer in layers.values()),
        "full_params": sum(layer.full_params() for layer in layers.values()),
    }
