"""Multi-stream all-reduce: each bucket's parts reduced concurrently on several process groups."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.futures import Future

from gnnkit.comm.base import Communicator, Slot, device_future


def split_parts(numel: int, streams: int, min_part: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the parts a bucket of ``numel`` elements is cut into.

    Policy: as many near-equal contiguous parts as there are streams, but never parts smaller than
    ``min_part`` elements (a small bucket goes whole to one stream: its cost is latency, which
    splitting only multiplies).
    """
    count = max(1, min(streams, numel // max(1, min_part)))
    base, extra = divmod(numel, count)
    parts, offset = [], 0
    for i in range(count):
        length = base + (i < extra)
        parts.append((offset, length))
        offset += length
    return parts


def concurrent_collectives(group: dist.ProcessGroup | None) -> int:
    """How many collectives ``group`` runs at once: a gloo group has a pool of worker threads (2
    by default, the pool torch creates groups with), each running one collective over the group's
    shared connections; an NCCL group runs its collectives in order on one CUDA stream."""
    if dist.get_backend(group) != "gloo":
        return 1
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    options = getattr(pg._get_backend(torch.device("cpu")), "options", None)
    return max(1, int(getattr(options, "_threads", 1)))


#: Per CUDA device, the stream on which multistream's parts are joined.
_JOIN_STREAMS: dict[torch.device, Any] = {}


def _join_stream(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """A context making a side stream of ``device`` current (none on the CPU)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    if device not in _JOIN_STREAMS:
        _JOIN_STREAMS[device] = torch.cuda.Stream(device)
    return torch.cuda.stream(_JOIN_STREAMS[device])


def _joined(parts: list[Future], flat: Tensor) -> Future[Tensor]:
    """A future of ``flat`` once every part's all-reduce is done, on its device's streams too.

    ``collect_all`` gives a CPU future, which would hand ``flat`` to DDP as soon as NCCL has queued
    the parts. The parts are waited for on a side stream (NCCL's futures complete when queued, so
    this runs inline in the backward pass: waiting on the compute stream would hold the remaining
    layers' kernels behind the all-reduces), and the result (CUDA-aware, :func:`device_future`)
    records its events there, which DDP's own wait then honours.
    """
    result = device_future(flat.device)

    def done(all_parts: Future) -> None:
        with _join_stream(flat.device):
            try:
                for part in all_parts.value():
                    part.wait()
            except Exception as err:  # noqa: BLE001 - re-raised in the waiting thread
                result.set_exception(err)
                return
            result.set_result(flat)

    torch.futures.collect_all(parts).add_done_callback(done)
    return result


class MultiStreamAllReduce(Communicator):
    """All-reduce each bucket as several parts in flight at once, on streams of their own.

    Multi-stream communication from Qiu's thesis (a worker takes part in several collectives at
    once; up to 13.4x throughput) and Horovod's several NCCL streams
    (<https://horovod.readthedocs.io/en/stable/api.html>, ``HOROVOD_NUM_NCCL_STREAMS``).

    A stream is one collective in flight. An NCCL process group runs its collectives in order on one
    CUDA stream, so each stream gets a process group of its own. A gloo group runs as many at once
    as it has worker threads (2), over one set of connections, so ``streams`` gloo streams share
    ``ceil(streams / 2)`` new groups. On ``bench/comm.py``'s emulated 1 Gbit/s + 0.5 ms link (4 ranks
    on 2 cores, GraphSAGE's 0.9 MB bucket), two parts in flight on one gloo group took 7-11% less
    time than one all-reduce; the same parts on two groups (twice the connections and event-loop
    threads) gained 5-7%, and nothing once both groups' connections had been warmed by large
    transfers.

    Assignment policy: a bucket is cut into ``streams`` contiguous near-equal parts (none smaller
    than ``min_part_kb``); part ``i`` goes to stream ``(first + i) % streams``, where ``first``
    advances by the number of parts after every bucket, so small buckets taking one part each still
    spread round-robin over the streams. Stream ``s`` runs on group ``s // c``, where ``c`` is the
    number of collectives a group runs at once. The order is the same on every rank because DDP
    launches buckets in the same order everywhere.

    Args:
        streams: Number of concurrent process groups (>= 1).
        min_part_kb: Smallest part worth a stream of its own, in KiB.
    """

    name = "multistream"

    def __init__(self, streams: int = 2, min_part_kb: float = 256.0) -> None:
        super().__init__()
        if streams < 1:
            raise ValueError(f"streams must be >= 1, got {streams}")
        if min_part_kb <= 0:
            raise ValueError(f"min_part_kb must be > 0, got {min_part_kb}")
        self.streams = streams
        self.min_part_kb = min_part_kb
        self.groups: list[dist.ProcessGroup | None] = []
        self.per_group = 1
        self._next = 0

    def setup(self, group: dist.ProcessGroup | None) -> None:
        """Create the streams' process groups (collective: every rank calls it in the same order)."""
        super().setup(group)
        ranks = dist.get_process_group_ranks(group) if group is not None else None
        backend = dist.get_backend(group)
        self.groups = [dist.new_group(ranks=ranks, backend=backend)]
        self.per_group = min(self.streams, concurrent_collectives(self.groups[0]))
        count = -(-self.streams // self.per_group)
        self.groups += [dist.new_group(ranks=ranks, backend=backend) for _ in range(count - 1)]

    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        if not self.groups:
            raise RuntimeError("MultiStreamAllReduce.setup() was not called: no process groups")
        flat.div_(self.world_size)
        min_part = max(1, int(self.min_part_kb * 1024) // flat.element_size())
        parts = split_parts(flat.numel(), self.streams, min_part)
        futures = []
        for i, (offset, length) in enumerate(parts):
            group = self.groups[(self._next + i) % self.streams // self.per_group]
            work = dist.all_reduce(flat.narrow(0, offset, length), group=group, async_op=True)
            futures.append(work.get_future())
        self._next = (self._next + len(parts)) % self.streams
        p = self.world_size
        self.bytes_sent += 2 * flat.numel() * flat.element_size() * (p - 1) // p
        return _joined(futures, flat)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "next_stream": self._next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._next = int(state.get("next_stream", 0)) % self.streams

    def info(self) -> dict[str, Any]:
        return {**super().info(), "streams": self.streams, "min_part_kb": self.min_part_kb,
                "groups": len(self.groups)}

    def extra_repr(self) -> str:
        return f"streams={self.streams}, min_part_kb={self.min_part_kb}"
