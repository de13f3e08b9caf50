"""Dense all-reduce, the same averaging as stock DDP."""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor
from torch.futures import Future

from gnnkit.comm.base import Communicator, Slot


class AllReduce(Communicator):
    """Average by one dense all-reduce per bucket, as DDP's default ``allreduce_hook`` does.

    The baseline every other mode is measured against, and the dense warm-up of the lossy modes.
    """

    name = "allreduce"

    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        flat.div_(self.world_size)
        self.bytes_sent += 2 * flat.numel() * flat.element_size() * (self.world_size - 1) // self.world_size
        work = dist.all_reduce(flat, group=self.group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])
