"""The DDP comm hook: maps buckets to parameters, fuses buckets, runs warm-up, tunes fusion size.

No ``from __future__ import annotations`` here: DDP's ``register_comm_hook`` compares the hook's
annotations with the real ``dist.GradBucket`` / ``Future[Tensor]`` objects.
"""

import math
import statistics
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.futures import Future

from gnnkit.comm.allreduce import AllReduce
from gnnkit.comm.base import Communicator, Slot, device_future


class FusionTuner:
    """Finds the fusion size by binary search over measured step time, then fixes it.

    TopKA2A's tensor-fusion tuning (Peng et al., ICPP 2024). The candidates are powers of two in
    MiB; the search assumes step time is unimodal in the fusion size and compares neighbours:
    ``t(mid) <= t(mid + 1)`` keeps the lower half. Each candidate is timed over ``steps`` steps
    (median), after ``skip`` steps that are never timed (DDP rebuilds its buckets after step one).

    Args:
        total_mb: Size of all gradients in MiB (the largest candidate covers it).
        steps: Timed steps per candidate.
        skip: Steps to ignore before the first measurement.
        agree: Makes a measured time the same on every rank (e.g. all-reduce max); identity when
            ``None``.
    """

    def __init__(self, total_mb: float, steps: int = 3, skip: int = 1,
                 agree: Optional[Callable[[float], float]] = None) -> None:
        if steps < 1:
            raise ValueError(f"tune_steps must be >= 1, got {steps}")
        top = max(0, math.ceil(math.log2(max(total_mb, 1.0))))
        self.candidates = [float(2 ** i) for i in range(top + 1)]
        self.steps, self.skip = steps, skip
        self.agree = agree or (lambda t: t)
        self.lo, self.hi = 0, len(self.candidates) - 1
        self.times: dict[int, float] = {}
        self._trial: Optional[int] = None
        self._samples: list[float] = []
        self.result: Optional[float] = self.candidates[0] if self.lo == self.hi else None
        self._advance()

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def current_mb(self) -> float:
        """Fusion size to use for the next step."""
        if self.result is not None:
            return self.result
        return self.candidates[self._trial]

    def _advance(self) -> None:
        """Pick the next candidate to time, or finish."""
        while self.result is None:
            if self.lo >= self.hi:
                self.result = self.candidates[self.lo]
                return
            mid = (self.lo + self.hi) // 2
            missing = [i for i in (mid, mid + 1) if i not in self.times]
            if missing:
                self._trial = missing[0]
                return
            if self.times[mid] <= self.times[mid + 1]:
                self.hi = mid
            else:
                self.lo = mid + 1

    def record(self, seconds: float) -> None:
        """Report the time of a step run with :attr:`current_mb`."""
        if self.done:
            return
        if self.skip > 0:
            self.skip -= 1
            return
        self._samples.append(seconds)
        if len(self._samples) == self.steps:
            self.times[self._trial] = self.agree(statistics.median(self._samples))
            self._samples = []
            self._advance()

    def __repr__(self) -> str:
        return (f"FusionTuner(candidates_mb={self.candidates}, steps={self.steps}, "
                f"result={self.result})")


def _forward(source: Future, targets: list[tuple[Future, int, int]]) -> None:
    """When ``source`` completes, give each target future its ``(offset, length)`` slice of the
    result, or the error (a bucket future left pending would hang DDP's backward)."""

    def done(f: Future) -> None:
        try:
            out = f.value()
        except Exception as err:  # noqa: BLE001 - re-raised in the waiting thread
            for fut, _, _ in targets:
                fut.set_exception(err)
            return
        for fut, offset, length in targets:
            fut.set_result(out.narrow(0, offset, length))

    source.add_done_callback(done)


class CommHook:
    """DDP comm hook that feeds buckets to a :class:`Communicator`.

    Per bucket it recovers which parameters own which elements (by identity, so state is keyed by
    name), optionally fuses consecutive buckets until ``fusion_mb`` is reached (one collective for
    several buckets), and runs dense all-reduce for the first ``warmup_steps`` steps.

    Args:
        communicator: The mode.
        module: The module DDP wraps (for parameter names).
        warmup_steps: Steps averaged with dense all-reduce before the communicator takes over.
        fusion_mb: Fuse buckets into groups of at least this many MiB (0: one group per bucket).
    """

    def __init__(self, communicator: Communicator, module: nn.Module, warmup_steps: int = 0,
                 fusion_mb: float = 0.0) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.communicator = communicator
        self.dense = AllReduce()
        self.warmup_steps = warmup_steps
        self.fusion_mb = fusion_mb
        self.names = {id(p): name for name, p in module.named_parameters()}
        self.steps = 0
        self.dense_steps = 0
        self._pending: list[tuple[Tensor, list[Slot], Future]] = []

    def setup(self, group: Optional[dist.ProcessGroup]) -> None:
        self.dense.setup(group)

    def layout(self, bucket: dist.GradBucket) -> list[Slot]:
        """Slots of the bucket's parameters, in buffer order."""
        slots, offset = [], 0
        for param in bucket.parameters():
            name = self.names.get(id(param))
            if name is None:
                raise RuntimeError("gnnkit comm hook: a bucket holds a parameter the module does not name")
            slots.append(Slot(name, tuple(param.shape), offset))
            offset += param.numel()
        if offset != bucket.buffer().numel():
            raise RuntimeError(f"gnnkit comm hook: bucket {bucket.index()} holds {bucket.buffer().numel()} "
                               f"elements but its parameters {offset}")
        return slots

    @property
    def in_warmup(self) -> bool:
        return self.steps < self.warmup_steps

    def _dispatch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        return (self.dense if self.in_warmup else self.communicator).launch(flat, layout)

    def __call__(self, state: Any, bucket: dist.GradBucket) -> Future[Tensor]:
        flat, layout = bucket.buffer(), self.layout(bucket)
        if self.fusion_mb <= 0:
            fut = self._dispatch(flat, layout)
        else:
            fut = device_future(flat.device)  # its result is set on the source's callback stream
            self._pending.append((flat, layout, fut))
            size = sum(t.numel() * t.element_size() for t, _, _ in self._pending)
            if size >= self.fusion_mb * 2**20 or bucket.is_last():
                self._flush()
        if bucket.is_last():
            self._finish_step()
        return fut

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if len(pending) == 1:
            flat, layout, fut = pending[0]
            _forward(self._dispatch(flat, layout), [(fut, 0, flat.numel())])
            return
        layout, offset = [], 0
        for flat, part, _ in pending:
            layout += [Slot(s.name, s.shape, s.offset + offset) for s in part]
            offset += flat.numel()
        fused = torch.cat([flat for flat, _, _ in pending])
        targets, pos = [], 0
        for flat, _, fut in pending:
            targets.append((fut, pos, flat.numel()))
            pos += flat.numel()
        _forward(self._dispatch(fused, layout), targets)

    def _finish_step(self) -> None:
        if self.in_warmup:
            self.dense_steps += 1
        else:
            self.communicator.step_done()
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "dense_steps": self.dense_steps, "fusion_mb": self.fusion_mb,
                "communicator": self.communicator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        self.dense_steps = int(state.get("dense_steps", 0))
        self.fusion_mb = float(state.get("fusion_mb", self.fusion_mb))
        self.communicator.load_state_dict(state.get("communicator", {}))

    def __repr__(self) -> str:
        return (f"CommHook({self.communicator!r}, warmup_steps={self.warmup_steps}, "
                f"fusion_mb={self.fusion_mb})")
