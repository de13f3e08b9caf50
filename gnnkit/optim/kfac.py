"""K-FAC: each linear layer's gradient preconditioned by Kronecker factors of its Fisher block.

Izadi, Fang, Stevenson, Lin, "Optimization of Graph Neural Networks with Natural Gradient Descent",
IEEE BigData 2020, <https://arxiv.org/abs/2008.09624> (reference code russellizadi/ssp), on top of
Martens & Grosse's K-FAC, <https://arxiv.org/abs/1503.05671>. Distributed as D-KFAC / SPD-KFAC
(Shi, Zhang, Li, ICDCS 2021, <https://arxiv.org/abs/2107.06533>): see :mod:`gnnkit.optim.kfac_comm`.

For a linear layer ``y = x W^T + b`` (``torch.nn.Linear`` or PyG's ``Linear``) with ``n`` input
rows ``a_i`` (``[a_i, 1]`` when the layer has a bias) and output gradients ``g_i``:

- ``A = (1/n) sum_i a_i a_i^T`` and ``G = (1/n) sum_i (n g_i)(n g_i)^T``: the gradient rows are
  rescaled by ``n`` (as in Martens & Grosse for a mean loss), so averaging the factors of ranks that
  each hold ``n / P`` rows gives the full batch's factors exactly;
- new factors are folded in every ``factor_update_interval`` steps as a running average
  ``F <- decay F + (1 - decay) F_new`` (the first replaces);
- every ``inv_update_interval`` steps the factors are inverted, and the weight gradient ``V``
  (``[out, in (+1)]``, bias as the last column) becomes ``G^-1 V A^-1`` with damping ``lambda``:
  ``inverse="eigen"`` solves ``(G (x) A + lambda I) vec(P) = vec(V)`` exactly through the factors'
  eigendecompositions (kfac-pytorch's method); ``inverse="cholesky"`` uses Tikhonov damping split
  over the factors, ``(G + sqrt(lambda) I)^-1 V (A + sqrt(lambda) I)^-1`` (the ssp code's);
- then the base optimizer steps on the preconditioned gradients: ``base="adam"`` (torch's Adam with
  L2 ``weight_decay`` added to the preconditioned gradient) as in Izadi et al.'s Planetoid
  experiments (``--optimizer Adam --preconditioner KFAC``), or ``base="sgd"`` (heavy-ball momentum).
  Parameters outside the hooked linear layers (GCNConv's bias added after aggregation, BatchNorm,
  embeddings) take the base step on their plain gradient.

**GCN factorisation.** Izadi et al. build ``A`` from the aggregated features ``Â X`` and ``G`` from
the gradient of the convolution's output. PyG's ``GCNConv`` (and gnnkit's ``SparseGCNConv``)
apply ``lin`` before aggregating, ``Â (X W^T)``, so the hook on ``lin`` sees ``X`` and the gradient
``Â^T δ`` instead. Both factor the same weight gradient (``δ^T Â X = (Â^T δ)^T X``), so both are
Kronecker approximations of the same Fisher block; we take the ``lin`` one because it needs no
knowledge of the layer's aggregation: the same hook serves GCN, SAGE (``lin_l`` on aggregated
neighbours, ``lin_r`` on the root), GIN's MLP, the MLP baseline, sampled blocks and gnnkit's sparse
convolutions, and it costs no extra sparse product.

**Binding protocol.** An optimizer needs the model's modules, which LightningCLI's ``optimizer:``
section cannot pass. :class:`KFAC` is built over parameter groups like any optimizer, then
:meth:`KFAC.bind` is called with the module (``NodeClassifier.configure_optimizers`` calls
``bind`` on any optimizer that has one): it registers a forward hook on every linear layer whose
weight the optimizer updates, recording ``A`` and, through a hook on the layer's output, ``G``, only
in training mode with grad enabled on factor-update steps (never in validation). A layer called
several times in one step keeps the factors of its last call.

All state (factors, eigendecompositions or inverses, moments, the K-FAC step counter under the key
``"kfac"``) lives in ``optimizer.state``, so ``state_dict()`` / ``load_state_dict()`` checkpoint
and resume it.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from gnnkit import setting_checks
from gnnkit.optim.adam import adam_moments
from gnnkit.optim.groups import dropped_on_error
from gnnkit.optim.kfac_comm import FactorComm

BASES = ("adam", "sgd")
INVERSES = ("eigen", "cholesky")
#: ``optimizer.state`` key of the optimizer-wide counters.
KFAC_KEY = "kfac"


@dataclass(frozen=True)
class KFACOptions:
    """K-FAC's options beyond the base optimizer's (see :class:`KFAC`)."""

    damping: float = 0.01
    factor_decay: float = 0.95
    factor_update_interval: int = 1
    inv_update_interval: int = 10
    inverse: str = "eigen"
    base: str = "adam"
    kfac_pipeline: bool = False
    kl_clip: float | None = None

    def __post_init__(self) -> None:
        setting_checks.positive_number("KFAC.damping", self.damping)
        if self.kl_clip is not None:
            setting_checks.positive_number("KFAC.kl_clip", self.kl_clip)
        setting_checks.below_one("KFAC.factor_decay", self.factor_decay)
        for name in ("factor_update_interval", "inv_update_interval"):
            setting_checks.at_least(f"KFAC.{name}", getattr(self, name), 1, "an integer >= 1")
        if self.inverse not in INVERSES:
            raise ValueError(f"KFAC.inverse: expected one of {INVERSES}, got {self.inverse!r}")
        if self.base not in BASES:
            raise ValueError(f"KFAC.base: expected one of {BASES}, got {self.base!r}")
        if self.kl_clip is not None and self.base != "sgd":
            warnings.warn(f"KFAC.kl_clip bounds base='sgd' steps; base={self.base!r} normalises its own and "
                          "leaves it unused", stacklevel=3)


def is_linear(module: nn.Module) -> bool:
    """Whether ``module`` computes ``x W^T + b`` (``torch.nn.Linear`` or PyG's ``Linear``)."""
    if isinstance(module, nn.Linear):
        return True
    try:
        from torch_geometric.nn.dense.linear import Linear as PyGLinear
    except ImportError:  # pragma: no cover - PyG is a dependency
        return False
    return isinstance(module, PyGLinear) and isinstance(module.weight, nn.Parameter) and not \
        isinstance(module.weight, nn.parameter.UninitializedParameter)


def factor_rows(x: Tensor) -> Tensor:
    """``x`` as rows for a factor, in float32 when it is 16-bit: mixed and 16-bit training hand
    bf16/fp16 activations and gradients, which the factors' averages and ``eigh`` need wider."""
    rows = x.detach().reshape(-1, x.shape[-1])
    return rows.float() if rows.dtype in (torch.float16, torch.bfloat16) else rows


def input_factor(x: Tensor, bias: bool) -> Tensor:
    """``A = (1/n) sum_i a_i a_i^T`` over the rows of ``x`` (a ones column appended when ``bias``)."""
    a = factor_rows(x)
    if bias:
        a = torch.cat([a, a.new_ones(a.shape[0], 1)], dim=1)
    with torch.autocast(a.device.type, enabled=False):  # the forward hook runs under mixed precision
        return a.T @ a / max(a.shape[0], 1)


def output_factor(grad: Tensor) -> Tensor:
    """``G = (1/n) sum_i (n g_i)(n g_i)^T = n sum_i g_i g_i^T`` over the rows of ``grad``."""
    g = factor_rows(grad)
    with torch.autocast(g.device.type, enabled=False):
        return g.T @ g * g.shape[0]


def eigen_inverse(factor: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvectors and (non-negative) eigenvalues of a symmetric factor."""
    values, vectors = torch.linalg.eigh(factor)
    return vectors.contiguous(), values.clamp(min=0.0)


def cholesky_inverse(factor: Tensor, damping: float) -> Tensor:
    """``(factor + damping I)^-1`` through a Cholesky factorisation."""
    eye = torch.eye(factor.shape[0], dtype=factor.dtype, device=factor.device)
    return torch.cholesky_inverse(torch.linalg.cholesky(factor + damping * eye))


def precondition(grad: Tensor, state: dict[str, Tensor], damping: float, inverse: str) -> Tensor:
    """``grad`` (``[out, in']``) preconditioned by a layer's inverted factors (see module doc)."""
    if inverse == "eigen":
        qa, da, qg, dg = state["QA"], state["dA"], state["QG"], state["dG"]
        rotated = qg.T @ grad @ qa
        return qg @ (rotated / (dg[:, None] * da[None, :] + damping)) @ qa.T
    return state["G_inv"] @ grad @ state["A_inv"]


#: What keeps a K-FAC training in bounds, said when its factors show it was not.
_BOUNDS = "a smaller lr (or kl_clip with base='sgd') keeps it in bounds"


@contextlib.contextmanager
def _inverting(name: str) -> Iterator[None]:
    """One line for factors that cannot be inverted (a 30-line ``LinAlgError`` about an
    ill-conditioned input came out of ``torch.linalg.eigh``; NaN or inf in them is found before,
    by :meth:`KFAC._check_finite`)."""
    try:
        yield
    except torch.linalg.LinAlgError as err:
        raise FloatingPointError(f"KFAC: the Kronecker factors of layer {name!r} cannot be inverted "
                                 f"({str(err).splitlines()[0][:80]}...): if the loss diverged, {_BOUNDS}; else "
                                 "a larger damping") from None


class _Layer:
    """One hooked linear layer: its parameters and this step's new factors."""

    def __init__(self, name: str, module: nn.Module) -> None:
        self.name, self.module = name, module
        self.weight: nn.Parameter = module.weight
        self.bias: nn.Parameter | None = module.bias if isinstance(getattr(module, "bias", None), Tensor) else None
        self.new_a: Tensor | None = None
        self.new_g: Tensor | None = None

    def cost(self) -> int:
        """Inversion cost ``d_A^3 + d_G^3`` (owner placement)."""
        d_in = self.weight.shape[1] + (self.bias is not None)
        return d_in**3 + self.weight.shape[0] ** 3


class KFAC(torch.optim.Optimizer):
    """K-FAC-preconditioned Adam or SGD for the linear layers of a bound module
    (<https://arxiv.org/abs/2008.09624>; distributed: <https://arxiv.org/abs/2107.06533>).

    Args:
        params: Parameters or parameter groups (all of the model's: K-FAC preconditions those of
            the bound linear layers, the base optimizer updates every one).
        lr: Learning rate.
        weight_decay: L2 penalty added to the preconditioned gradient (group default).
        momentum: SGD momentum (``base="sgd"``).
        betas: Adam's moment decay rates (``base="adam"``).
        eps: Adam's denominator term.
        damping: Tikhonov damping ``lambda`` of the Fisher blocks.
        factor_decay: Running-average decay of the factors.
        factor_update_interval: Steps between factor updates.
        inv_update_interval: Steps between inversions.
        inverse: ``"eigen"`` (exact damped Kronecker inverse) or ``"cholesky"`` (damping split
            over the factors).
        base: ``"adam"`` or ``"sgd"``.
        kfac_pipeline: On 2+ ranks, all-reduce each factor as soon as it is ready, overlapping
            backward (SPD-KFAC), and on steps without an inversion fold the reduced factors in
            when the next step starts, so the reductions also overlap the preconditioning and
            update (same factors, same steps); otherwise all factors are reduced after backward
            and waited for at once (D-KFAC).
        kl_clip: With ``base="sgd"``, scale the preconditioned gradients by ``nu = min(1,
            sqrt(kl_clip / (lr^2 sum(P * V))))`` (``P`` preconditioned, ``V`` plain, over the
            layers): the trust region of Ba, Grosse and Martens, "Distributed Second-Order
            Optimization using Kronecker-Factored Approximations", ICLR 2017
            (<https://openreview.net/forum?id=SkkTMpjex>), kfac-pytorch's ``kl_clip`` (its default
            0.001). Unset (the default), the SGD step is not bounded: an MLP diverged at lr 0.01 where
            0.001 trained, while Adam's normalised step keeps ``base="adam"`` in bounds.

    Raises:
        FloatingPointError: In :meth:`step`, a factor that holds NaN or inf (the training diverged),
            or one that cannot be inverted, in one line naming the layer.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 0.01,
        weight_decay: float = 0.0,
        momentum: float = 0.9,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        damping: float = 0.01,
        factor_decay: float = 0.95,
        factor_update_interval: int = 1,
        inv_update_interval: int = 10,
        inverse: str = "eigen",
        base: str = "adam",
        kfac_pipeline: bool = False,
        kl_clip: float | None = None,
    ) -> None:
        setting_checks.switch("KFAC.kfac_pipeline", kfac_pipeline)  # bool("no") was True
        self.options = KFACOptions(damping, factor_decay, factor_update_interval, inv_update_interval,
                                   inverse, base, kfac_pipeline, kl_clip)
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum, "betas": betas, "eps": eps}
        super().__init__(params, defaults)  # each group checked by add_param_group
        self.state[KFAC_KEY] = {"step": 0}
        self._layers: list[_Layer] = []
        self._handles: list[Any] = []
        self.comm: FactorComm | None = None
        #: Pipelined factor reductions still in flight, and the ``(weight, A, G)`` they fold into.
        self._deferred: tuple[list[Any], list[tuple[Tensor, Tensor, Tensor]]] | None = None

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's, then the group's hyper-parameters checked, its own and the defaults it takes (a
        group's own negative ``weight_decay`` or NaN ``lr`` was taken before)."""
        super().add_param_group(param_group)
        with dropped_on_error(self) as group:
            for name in ("lr", "weight_decay", "eps"):
                setting_checks.positive_number(f"KFAC.{name}", group[name], zero=True)
            setting_checks.below_one("KFAC.momentum", group["momentum"])
            setting_checks.betas("KFAC.betas", group["betas"])
            group["betas"] = tuple(group["betas"])

    # -- binding and hooks -------------------------------------------------------------------

    def bind(self, module: nn.Module) -> "KFAC":
        """Hook the linear layers of ``module`` whose weight this optimizer updates (see module doc).

        On 2+ initialised torch.distributed ranks this is collective (it creates the factors'
        process group), so every rank must bind the same model."""
        if not isinstance(module, nn.Module):
            raise TypeError(f"KFAC.bind: expected the model (a torch.nn.Module), got {type(module).__name__}")
        self.unbind()
        mine = {id(p) for group in self.param_groups for p in group["params"]}
        for name, sub in module.named_modules():
            if is_linear(sub) and id(sub.weight) in mine:
                layer = _Layer(name, sub)
                self._layers.append(layer)
                self._handles.append(sub.register_forward_hook(self._forward_hook(layer)))
        if not self._layers:
            raise ValueError("KFAC.bind: the module has no linear layer whose weight this optimizer updates")
        self.comm = FactorComm.create([layer.cost() for layer in self._layers])
        return self

    def unbind(self) -> None:
        """Remove the hooks of an earlier :meth:`bind` (folding in any deferred factors first)."""
        self._fold_deferred()
        for handle in self._handles:
            handle.remove()
        self._handles, self._layers = [], []

    @property
    def layers(self) -> list[str]:
        """Names of the hooked layers, in forward registration order."""
        return [layer.name for layer in self._layers]

    def _recording(self, module: nn.Module) -> bool:
        return (module.training and torch.is_grad_enabled()
                and self.state[KFAC_KEY]["step"] % self.options.factor_update_interval == 0)

    def _forward_hook(self, layer: _Layer) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Tensor) -> None:
            if not self._recording(module) or not isinstance(output, Tensor) or not output.requires_grad:
                return
            layer.new_a = input_factor(inputs[0], layer.bias is not None)
            if self.options.kfac_pipeline and self.comm is not None:
                self.comm.reduce_async(layer.new_a)

            def grad_hook(grad: Tensor) -> None:
                layer.new_g = output_factor(grad)
                if self.options.kfac_pipeline and self.comm is not None:
                    self.comm.reduce_async(layer.new_g)

            output.register_hook(grad_hook)
        return hook

    # -- the step ----------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """Fold in this step's factors, refresh the inverses when due, precondition the hooked
        layers' gradients, then take the base optimizer's step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        counters = self.state[KFAC_KEY]
        step = counters["step"]
        if not self._layers and step == 0:
            warnings.warn(f"KFAC: no layer is bound, so this steps as plain {self.options.base}; call "
                          "KFAC(...).bind(model) once after building it (gnnkit's modules do)", stacklevel=2)
        self._fold_deferred()
        inverting = step % self.options.inv_update_interval == 0
        if step % self.options.factor_update_interval == 0:
            self._update_factors(defer=not inverting)
        if inverting:
            self._update_inverses()
        clipping = self.options.kl_clip is not None and self.options.base == "sgd"
        lrs = {id(p): g["lr"] for g in self.param_groups for p in g["params"]} if clipping else {}
        quadratic = [self._precondition(layer, lrs.get(id(layer.weight))) for layer in self._layers]
        if clipping:
            self._clip(quadratic)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._base_update(param, group)
        counters["step"] = step + 1
        return loss

    def _update_factors(self, defer: bool) -> None:
        """Reduce this step's factors across the ranks and fold them into the running averages; with
        ``defer`` (pipelined, and no inversion this step) the fold waits until the next step starts
        (:meth:`_fold_deferred`), so the reductions overlap the preconditioning and the update."""
        ready = [(layer.weight, layer.new_a, layer.new_g) for layer in self._layers
                 if layer.new_a is not None and layer.new_g is not None]
        for layer in self._layers:
            layer.new_a = layer.new_g = None
        if self.comm is None:
            self._fold(ready)
            return
        if not self.options.kfac_pipeline:
            for _, new_a, new_g in ready:
                self.comm.reduce_async(new_a)
                self.comm.reduce_async(new_g)
        works = self.comm.detach()
        if defer and self.options.kfac_pipeline:
            self._deferred = (works, ready)
            return
        self.comm.wait(works)
        self._fold(ready)

    def _fold_deferred(self) -> None:
        """Wait for the reductions an earlier step deferred and fold their factors in."""
        if self._deferred is not None:
            works, ready = self._deferred
            self._deferred = None
            self.comm.wait(works)
            self._fold(ready)

    def _fold(self, ready: list[tuple[Tensor, Tensor, Tensor]]) -> None:
        """``F <- decay F + (1 - decay) F_new`` for each layer's ``A`` and ``G`` (the first replaces)."""
        decay = self.options.factor_decay
        for weight, new_a, new_g in ready:
            state = self.state[weight]
            for key, new in (("A", new_a), ("G", new_g)):
                if key in state:
                    state[key].mul_(decay).add_(new, alpha=1.0 - decay)
                else:
                    state[key] = new.clone()

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, with any deferred factors folded in first."""
        self._fold_deferred()
        return super().state_dict()

    def _update_inverses(self) -> None:
        opts = self.options
        self._check_finite()
        for index, layer in enumerate(self._layers):
            state = self.state[layer.weight]
            if "A" not in state:
                continue
            if self.comm is not None and not self.comm.owns(index):
                _allocate_inverses(state, opts.inverse)
                continue
            with _inverting(self._layers[index].name):
                if opts.inverse == "eigen":
                    state["QA"], state["dA"] = eigen_inverse(state["A"])
                    state["QG"], state["dG"] = eigen_inverse(state["G"])
                else:
                    root = math.sqrt(opts.damping)
                    state["A_inv"] = cholesky_inverse(state["A"], root)
                    state["G_inv"] = cholesky_inverse(state["G"], root)
        if self.comm is not None:
            keys = ("QA", "dA", "QG", "dG") if opts.inverse == "eigen" else ("A_inv", "G_inv")
            for index, layer in enumerate(self._layers):
                state = self.state[layer.weight]
                if "A" in state:
                    self.comm.broadcast_async([state[k] for k in keys], index)
            self.comm.wait()

    def _check_finite(self) -> None:
        """Raise :class:`FloatingPointError` naming the first layer whose factors hold NaN or inf (a
        diverged training), on every rank alike (the factors are all-reduced: an owner rank alone
        raising left the others waiting for its broadcast), with one host read for all layers."""
        factored = [(layer.name, self.state[layer.weight]) for layer in self._layers if "A" in self.state[layer.weight]]
        if not factored:
            return
        finite = torch.stack([torch.isfinite(s["A"]).all() & torch.isfinite(s["G"]).all() for _, s in factored])
        if not bool(finite.all()):
            name = factored[int((~finite).nonzero()[0])][0]
            raise FloatingPointError(f"KFAC: the Kronecker factors of layer {name!r} hold NaN or inf: the training "
                                     f"diverged; {_BOUNDS}")

    def _precondition(self, layer: _Layer, lr: float | None = None) -> Tensor | None:
        """Precondition the layer's gradients in place; with the layer's ``lr`` (when clipping),
        returns ``lr^2 sum(P * V)`` for :meth:`_clip` (``None``: not clipping, or the layer had
        nothing to precondition)."""
        state = self.state[layer.weight]
        ready = "QA" in state or "A_inv" in state
        if layer.weight.grad is None or not ready:
            return None
        grad = layer.weight.grad
        if layer.bias is not None and layer.bias.grad is not None:
            grad = torch.cat([grad, layer.bias.grad[:, None]], dim=1)
        wide = state["QA" if "QA" in state else "A_inv"].dtype  # float32 factors of 16-bit weights
        result = precondition(grad.to(wide), state, self.options.damping, self.options.inverse)
        quadratic = None
        if lr is not None:  # read grad before the copy: it is weight.grad itself where the layer has no bias
            quadratic = (result * grad.to(wide)).sum() * lr**2
        layer.weight.grad.copy_(result[:, : layer.weight.shape[1]])
        if layer.bias is not None and layer.bias.grad is not None:
            layer.bias.grad.copy_(result[:, -1])
        return quadratic

    def _clip(self, quadratic: list[Tensor | None]) -> None:
        """Scale the preconditioned gradients by ``nu`` (``kl_clip``; on the device, no host sync)."""
        terms = [q for q in quadratic if q is not None]
        if not terms:
            return
        nu = (self.options.kl_clip / torch.stack(terms).sum().abs().clamp_min(1e-30)).sqrt().clamp_max(1.0)
        for layer, q in zip(self._layers, quadratic):
            if q is not None:
                for param in (layer.weight, layer.bias):
                    if param is not None and param.grad is not None:
                        param.grad.mul_(nu.to(param.grad.dtype))

    def _base_update(self, param: Tensor, group: dict[str, Any]) -> None:
        grad = param.grad
        if grad.is_sparse:
            raise RuntimeError("KFAC: sparse gradients are not supported (use a dense nn.Embedding)")
        if group["weight_decay"]:
            grad = grad.add(param, alpha=group["weight_decay"])
        state = self.state[param]
        if self.options.base == "sgd":
            if group["momentum"]:
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = grad.clone()
                else:
                    state["momentum_buffer"].mul_(group["momentum"]).add_(grad)
                grad = state["momentum_buffer"]
            param.add_(grad, alpha=-group["lr"])
            return
        exp_avg, denom, bias1 = adam_moments(state, grad, group["betas"], group["eps"])
        param.addcdiv_(exp_avg, denom, value=-group["lr"] / bias1)


def _allocate_inverses(state: dict[str, Tensor], inverse: str) -> None:
    """Receive buffers, shaped like the owner's results, for a layer another rank inverts."""
    a, g = state["A"], state["G"]
    if inverse == "eigen":
        for key, factor in (("A", a), ("G", g)):
            if f"Q{key}" not in state:
                state[f"Q{key}"] = torch.empty_like(factor)
                state[f"d{key}"] = factor.new_empty(factor.shape[0])
    else:
        for key, factor in (("A_inv", a), ("G_inv", g)):
            if key not in state:
                state[key] = torch.empty_like(factor)
