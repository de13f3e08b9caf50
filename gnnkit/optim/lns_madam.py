"""LNS-Madam: the multiplicative Madam update on weights stored as LNS integer codes.

Zhao et al., "LNS-Madam: Low-Precision Training in Logarithmic Number System using Multiplicative
Weight Update", IEEE Trans. Computers 2022, <https://arxiv.org/abs/2106.13914>; Madam from Bernstein
et al., "Learning compositional functions via multiplicative weight updates", NeurIPS 2020,
<https://arxiv.org/abs/2006.14560>.

Every parameter with two or more dimensions (the layers' weight matrices) is stored between steps as
``int8`` LNS codes and an FP32 per-tensor scale (:mod:`gnnkit.optim.lns`); the parameter's float
tensor, which the model computes with, is always exactly the decoded codes (the optimizer encodes
the initial weights when it is built, and decodes after every step). A step (Madam, in base 2 as in
the authors' reference ``jiaweizzhao/lns-madam-optimizer``):

1. ``v <- beta * v + (1 - beta) * g^2``; ``g* = g / sqrt(v / (1 - beta^t))``, ``0/0 -> 0``, clamped to
   ``[-g_bound, g_bound]`` (the normalised gradient);
2. in the log domain, the magnitude's base-2 logarithm moves by ``-lr * (sign(w) * g* + weight_decay)``,
   i.e. ``|w| <- |w| * 2^(-lr * sign(w) * g*)``, which is the exponent code moving by
   ``gamma * lr * (sign(w) * g* + weight_decay)``; the sign never changes;
3. the new code is rounded to an integer (``rounding="stochastic"``: up with probability equal to its
   fractional part, so the expected code is the exact one and updates smaller than a code step still
   act; ``"nearest"``: deterministic) and clamped to ``[0, max_code]``. Code 0 is the largest
   magnitude, the scale, which is ``max(max|w_0|, p_scale * rms(w_0))``: the clamp is Madam's max-norm
   bound ``|w| <= p_scale * rms(w_0)`` (``p_scale = 3`` in Madam and the reference).

Stochastic rounding draws from a generator seeded by ``(seed, step, parameter index)``, so a run
is reproducible and resumes identically from a ``state_dict``. Parameters with fewer than two
dimensions (biases, BatchNorm's affine terms, which start at 0 or 1 and which a multiplicative
update cannot move off zero) stay FP32 and take an Adam step with ``fp_lr``; they are reported as
FP32 weight bytes.

:meth:`LNSMadam.weight_bytes` gives the stored weight bytes (one byte per code plus 4 per scale,
and 4 per FP32 parameter entry) against the same weights in FP32; ``report.json`` carries them as
``optimizer.weight_bytes`` / ``optimizer.weight_bytes_fp32``. The decoded float copy the model
computes with is a working buffer, rebuilt from the codes on every step.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

import torch
from torch import Tensor

from gnnkit import setting_checks
from gnnkit.optim.adam import adam_moments
from gnnkit.optim.groups import dropped_on_error
from gnnkit.optim.lns import LNSFormat, code_bytes, decode, default_scale, encode, pack

#: How a stepped exponent code becomes an integer.
ROUNDINGS = ("stochastic", "nearest")


def normalised_gradient(grad: Tensor, exp_avg_sq: Tensor, step: int, beta: float, g_bound: float) -> Tensor:
    """Madam's ``g / sqrt(v_hat)`` (after updating ``exp_avg_sq`` in place), ``0/0 -> 0``, clamped."""
    exp_avg_sq.mul_(beta).addcmul_(grad, grad, value=1.0 - beta)
    normed = grad / (exp_avg_sq / (1.0 - beta**step)).sqrt()
    return normed.nan_to_num_(nan=0.0, posinf=g_bound, neginf=-g_bound).clamp_(-g_bound, g_bound)


def round_codes(codes: Tensor, rounding: str, generator: torch.Generator | None) -> Tensor:
    """Real-valued codes to integers: nearest, or stochastically (up with the fractional part's
    probability, drawn from ``generator``)."""
    if rounding == "nearest":
        return codes.round()
    noise = torch.rand(codes.shape, generator=generator, dtype=codes.dtype).to(codes.device)
    return (codes + noise).floor()


class LNSMadam(torch.optim.Optimizer):
    """Madam on weights stored as LNS codes (<https://arxiv.org/abs/2106.13914>); see the module
    docstring for the update.

    ``lr``, ``weight_decay`` and ``fp_lr`` are group defaults; the number format, ``p_scale``,
    ``g_bound``, ``beta``, ``rounding`` and ``seed`` are global.

    Args:
        params: Parameters or parameter groups.
        lr: Madam's learning rate, in base-2 log units per unit of normalised gradient (the
            reference's default is ``1/128``).
        bits: Bits per stored weight, sign included (2 to 8).
        gamma: LNS base factor: codes step by ``2^(1/gamma)``.
        p_scale: Max-norm bound in multiples of the initial RMS (Madam: 3).
        g_bound: Clamp of the normalised gradient (reference: 10).
        beta: Decay of the squared-gradient average (Madam: 0.999).
        weight_decay: Extra shrinkage of the log2 magnitude per step, times ``lr``.
        rounding: ``"stochastic"`` or ``"nearest"``.
        fp_lr: Adam learning rate of the parameters kept in FP32 (fewer than 2 dimensions); an lr
            scheduler scales it as it scales ``lr`` (:func:`fp_rate`).
        fp_betas: Adam's moment decay rates for those.
        eps: Adam's epsilon for those.
        seed: Seed of the stochastic rounding.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1.0 / 128,
        bits: int = 8,
        gamma: float = 8.0,
        p_scale: float = 3.0,
        g_bound: float = 10.0,
        beta: float = 0.999,
        weight_decay: float = 0.0,
        rounding: str = "stochastic",
        fp_lr: float = 0.01,
        fp_betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        seed: int = 0,
    ) -> None:
        self.format = LNSFormat(bits=bits, gamma=gamma)
        if not (isinstance(beta, (int, float)) and 0.0 <= beta < 1.0):
            raise ValueError(f"LNSMadam.beta: expected a number in [0, 1), got {beta!r}")
        setting_checks.betas("LNSMadam.fp_betas", fp_betas)
        for name, value in (("p_scale", p_scale), ("g_bound", g_bound)):
            setting_checks.positive_number(f"LNSMadam.{name}", value)
        setting_checks.positive_number("LNSMadam.eps", eps, zero=True)
        setting_checks.at_least("LNSMadam.seed", seed, 0, "an integer >= 0")
        if rounding not in ROUNDINGS:
            raise ValueError(f"LNSMadam.rounding: expected one of {list(ROUNDINGS)}, got {rounding!r}")
        self.p_scale, self.g_bound, self.beta = p_scale, g_bound, beta
        self.rounding, self.seed, self.fp_betas, self.eps = rounding, seed, tuple(fp_betas), eps
        defaults = {"lr": lr, "weight_decay": weight_decay, "fp_lr": fp_lr}
        super().__init__(params, defaults)  # each group checked by add_param_group
        for param in self._params():
            if self.quantized(param):
                _warn_zeros(param)
                self._encode(param)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's, then the group's ``lr``, ``fp_lr`` and ``weight_decay`` checked (finite, >= 0): a NaN
        rate ran hidden by the quantisation, and a group's own negative one was taken."""
        super().add_param_group(param_group)
        with dropped_on_error(self) as group:
            for name in ("lr", "fp_lr", "weight_decay"):
                setting_checks.positive_number(f"LNSMadam.{name}", group[name], zero=True)
            group.setdefault(BASE_LR, group["lr"])

    @staticmethod
    def quantized(param: Tensor) -> bool:
        """Whether ``param`` is stored as LNS codes (two or more dimensions)."""
        return param.dim() >= 2

    def _params(self) -> list[Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    @torch.no_grad()
    def _encode(self, param: Tensor) -> None:
        """Store ``param`` as codes and make its float tensor the decoded codes."""
        state = self.state[param]
        state["scale"] = default_scale(param, self.p_scale).to(param.device)
        state["codes"] = encode(param, state["scale"], self.format)
        state["step"] = 0
        state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
        param.copy_(decode(state["codes"], state["scale"], self.format, param.dtype))

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One step: Madam on the codes of the quantized parameters, Adam on the rest."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    if param.grad.is_sparse:
                        raise RuntimeError("LNSMadam: sparse gradients are not supported")
                    if self.quantized(param):
                        self._madam(param, group, index)
                    else:
                        self._adam(param, group)
                index += 1
        return loss

    def _madam(self, param: Tensor, group: dict[str, Any], index: int) -> None:
        state = self.state[param]
        if "codes" not in state:  # a parameter added after construction (add_param_group)
            self._encode(param)
        state["step"] += 1
        step = state["step"]
        normed = normalised_gradient(param.grad.float(), state["exp_avg_sq"], step, self.beta, self.g_bound)
        codes, fmt = state["codes"], self.format
        sign = torch.sign(codes).float()
        moved = (codes.float().abs() - 1.0) + fmt.gamma * group["lr"] * (sign * normed + group["weight_decay"])
        generator = None
        if self.rounding == "stochastic":
            generator = torch.Generator().manual_seed(((self.seed * 1_000_003 + step) * 65_537 + index) % 2**63)
        new_code = round_codes(moved, self.rounding, generator).clamp_(0, fmt.max_code)
        state["codes"] = pack(sign, new_code)
        param.copy_(decode(state["codes"], state["scale"], fmt, param.dtype))

    def _adam(self, param: Tensor, group: dict[str, Any]) -> None:
        exp_avg, denom, bias1 = adam_moments(self.state[param], param.grad, self.fp_betas, self.eps)
        param.addcdiv_(exp_avg, denom, value=-fp_rate(group) / bias1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loader casts floating state to the parameter's dtype and the rest only moves; the
        codes come back as ``int8`` (exact: they are small integers) and the parameters are set to
        the decoded codes. A group of a checkpoint written before ``lr_at_start`` takes this
        optimizer's (the run's configured lr), so :func:`fp_rate` follows its schedule too."""
        starts = [group.get(BASE_LR) for group in self.param_groups]
        super().load_state_dict(state_dict)
        for group, start in zip(self.param_groups, starts):
            if start is not None:
                group.setdefault(BASE_LR, start)
        with torch.no_grad():
            for param in self._params():
                state = self.state.get(param, {})
                if "codes" in state:
                    state["codes"] = state["codes"].to(torch.int8)
                    state["scale"] = state["scale"].float()
                    param.copy_(decode(state["codes"], state["scale"], self.format, param.dtype))

    #: State keys that hold the stored weights, not optimizer state (:func:`optimizer_state_bytes`).
    weight_keys = ("codes", "scale")

    def weight_bytes(self) -> dict[str, int]:
        """``{"weight_bytes", "weight_bytes_fp32"}``: the stored weights (codes + scales for the
        quantized parameters, FP32 for the others) and the same parameters all in FP32."""
        stored = fp32 = 0
        for param in self._params():
            fp32 += param.numel() * 4
            state = self.state.get(param, {})
            stored += code_bytes(state["codes"]) if "codes" in state else param.numel() * 4
        return {"weight_bytes": stored, "weight_bytes_fp32": fp32}


#: A group's key for its ``lr`` as the group was made, against which :func:`fp_rate` scales.
BASE_LR = "lr_at_start"


def fp_rate(group: dict[str, Any]) -> float:
    """The group's ``fp_lr`` scaled as any lr scheduler scaled its ``lr`` since the group was made
    (``lr / lr_at_start``; torch's ``initial_lr`` is OneCycleLR's start, 1/25 of its peak, and
    ReduceLROnPlateau sets none). A schedule drove the quantised weights alone, and biases and norms
    kept training at the full ``fp_lr``."""
    start = group.get(BASE_LR)
    return group["fp_lr"] * (group["lr"] / start if start else 1.0)


def _warn_zeros(param: Tensor) -> None:
    """Warn about entries of a quantized weight that are exactly 0: a multiplicative update keeps them
    at 0 for good (a zero-initialised layer, or InRank's spare modes, never learn)."""
    zeros = param.numel() - int(torch.count_nonzero(param))
    if zeros:
        warnings.warn(f"LNSMadam: {zeros} of {param.numel()} entries of a {list(param.shape)} weight are 0, which "
                      "a multiplicative update never moves; initialise it non-zero or train it with another "
                      "optimizer", stacklevel=3)
