"""signSGD with majority vote: two bits per gradient element on the wire (its sign, and whether it is 0)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.futures import Future

from gnnkit.comm.base import Slot, all_gather_single, read_on_this_stream
from gnnkit.comm.residuals import ErrorFeedback, Residuals


def _shifts(device: torch.device) -> Tensor:
    """The bit positions 0..7 as uint8, made on ``device`` (a copy from host memory would sync)."""
    return torch.arange(8, dtype=torch.uint8, device=device)


def pack_bits(mask: Tensor) -> Tensor:
    """1-D boolean ``mask``, eight per byte (little-endian within a byte): ``ceil(n/8)`` uint8."""
    n = mask.numel()
    bits = torch.zeros((n + 7) // 8 * 8, dtype=torch.uint8, device=mask.device)
    bits[:n] = mask.to(torch.uint8)
    return (bits.view(-1, 8) << _shifts(mask.device)).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: Tensor, n: int) -> Tensor:
    """Inverse of :func:`pack_bits` on ``[..., bytes]``: ``[..., n]`` booleans."""
    bits = (packed.unsqueeze(-1) >> _shifts(packed.device)) & 1
    return bits.flatten(-2)[..., :n].bool()


def count_bits(packed: Tensor, n: int) -> Tensor:
    """How many of ``P`` packed rows ``[P, bytes]`` set each bit: ``[n]`` int32, the same as
    ``unpack_bits(packed, n).sum(0)`` without materialising ``[P, n]``."""
    counts = torch.stack([((packed >> b) & 1).sum(dim=0, dtype=torch.int32) for b in range(8)], dim=1)
    return counts.flatten()[:n]


def pack_signs(x: Tensor) -> Tensor:
    """The ternary signs of 1-D ``x`` as two bit planes, ``[x > 0 | x != 0]`` (``2 ceil(n/8)`` uint8):
    an element 0 on a rank abstains from the vote (one bit, ``x >= 0``, sent it as +, so an
    element whose gradient was 0 on every rank, an embedding row no batch touched, moved)."""
    return torch.cat([pack_bits(x > 0), pack_bits(x != 0)])


def vote_signs(rows: Tensor, n: int) -> Tensor:
    """The sum over ``P`` ranks of the signs (+1, -1, 0) that :func:`pack_signs` rows ``[P, 2 bytes]``
    carry: ``[n]`` int32."""
    half = rows.shape[1] // 2
    return count_bits(rows[:, :half], n) * 2 - count_bits(rows[:, half:], n)


def slot_means(values: Tensor, layout: list[Slot]) -> Tensor:
    """The mean of ``values`` over each slot's elements, float32 ``[len(layout)]``."""
    return torch.stack([values[s.offset:s.offset + s.numel].mean() for s in layout]).to(torch.float32)


def per_element(scales: Tensor, layout: list[Slot], n: int) -> Tensor:
    """Each slot's scale repeated over its elements (0 outside every slot), ``[n]``."""
    out = scales.new_zeros(n)
    for scale, s in zip(scales, layout):
        out[s.offset:s.offset + s.numel] = scale
    return out


class SignSGD(ErrorFeedback):
    """signSGD with majority vote, from "signSGD with Majority Vote is Communication Efficient and
    Fault Tolerant" (Bernstein, Zhao, Azizzadenesheli, Anandkumar, ICLR 2019,
    <https://arxiv.org/abs/1810.05291>).

    Each rank all-gathers the signs of its gradient, bit-packed in two planes (sign and non-zero:
    16x less than float32), plus one float32 per parameter: its mean absolute gradient. The result
    is the elementwise majority vote of the signs, a 0 abstaining (0 on a tie, and where every
    rank's gradient is 0, as for an embedding row no batch touched or a masked weight: such
    elements stay where they are, as under DDP), times the ranks' average of those means, so
    optimizers that use the magnitude (SGD) keep a sensible step size; Adam-style optimizers are invariant to it. Scales per parameter (the
    per-tensor scaled sign of Karimireddy et al.) make every parameter's update independent of how
    DDP groups parameters into buckets, which changes after DDP's first step: a resumed run
    therefore takes the same steps as an uninterrupted one.

    With ``error_feedback``, each rank signs its gradient plus the residual, and keeps as residual
    what its scaled sign did not carry (``acc - mean|acc| * s``, with ``s`` the sign it sent, 0 for
    zeros): the error-feedback signSGD of Karimireddy, Rebjock, Stich and Jaggi, "Error Feedback
    Fixes SignSGD and other Gradient Compression Schemes", ICML 2019,
    <https://arxiv.org/abs/1901.09847>. Same bytes on the wire.

    With ``momentum`` (beta > 0), each rank signs its momentum ``m = beta m + (1 - beta) g`` instead
    of its gradient: Signum, the variant the majority-vote paper trains with (its Algorithm 3).
    Momentum averages out the noise of single mini-batches, so the ranks' signs agree more often
    and fewer votes tie (with 2 ranks every disagreement is a tie and sends 0).

    Args:
        error_feedback: Carry each rank's compression error into its next step.
        momentum: Worker momentum beta of Signum (0: plain signSGD).
    """

    name = "signsgd"

    def __init__(self, error_feedback: bool = False, momentum: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"signsgd momentum must be in [0, 1), got {momentum}")
        self.error_feedback = error_feedback
        self.momentum = momentum
        self.velocity = Residuals()  # beta * m per parameter, kept in the state like the residuals

    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        p, n = self.world_size, flat.numel()
        if self.momentum:  # m = beta m + (1 - beta) g; beta m is what stays for the next step
            flat = self.velocity.add_to(flat * (1.0 - self.momentum), layout)
            self.velocity.store(flat.mul(self.momentum), layout)
        signed = self.residuals.add_to(flat, layout) if self.error_feedback else flat
        scales = slot_means(signed.abs(), layout)
        payload = torch.cat([pack_signs(signed), scales.view(torch.uint8)])
        if self.error_feedback:  # what the scaled sign does not carry stays here (a zero sends nothing)
            scale = per_element(scales, layout, n).to(signed.dtype)
            self.residuals.store(signed.sub_(torch.sign(signed) * scale), layout)
        gathered = torch.empty(p * payload.numel(), dtype=torch.uint8, device=flat.device)
        work = all_gather_single(gathered, payload, group=self.group, async_op=True)
        self.bytes_sent += payload.numel() * (p - 1)
        tail = 4 * len(layout)

        def vote(_: Future) -> Tensor:
            read_on_this_stream(gathered)
            rows = gathered.view(p, -1)
            every = rows[:, -tail:].reshape(-1).clone().view(torch.float32).view(p, -1)  # fresh, aligned
            majority = vote_signs(rows[:, :-tail], n).sign()
            return (majority.to(torch.float32) * per_element(every.mean(0), layout, n)).to(flat.dtype)

        return work.get_future().then(vote)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "velocity": self.velocity.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.velocity.load_state_dict(state.get("velocity", {}))

    def info(self) -> dict[str, Any]:
        return {**super().info(), "error_feedback": self.error_feedback, "momentum": self.momentum}

    def extra_repr(self) -> str:
        parts = [f"error_feedback={self.error_feedback}"] if self.error_feedback else []
        return ", ".join(parts + ([f"momentum={self.momentum}"] if self.momentum else []))
