"""Rank 0 partitions for longer than the process group's collective timeout while rank 1 waits:
``partition_wait_worker.py OUT ENTRY`` (a cache entry folder) on 2 gloo ranks of a 2 s timeout.
Writes, per rank, the number of nodes its partition owns."""

from __future__ import annotations

import datetime
import os
import socket
import sys
import time
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from gnnkit.partitioned import rank_data
from pipeline.cache import load_entry

TIMEOUT = datetime.timedelta(seconds=2)


def slow_partition_entry(*args, **kwargs):
    """The real partitioning, 5 s late on rank 0's first call (a large graph's METIS; the later
    calls find the entries)."""
    if dist.get_rank() == 0 and not calls:
        time.sleep(5)
    calls.append(args)
    return real_partition_entry(*args, **kwargs)


real_partition_entry = rank_data.partition_entry
calls: list = []


def worker(rank: int, world: int, port: int, out: str, entry_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    rank_data.partition_entry = slow_partition_entry
    part = rank_data.open_rank_partition(load_entry(Path(entry_path)), world)
    dist.barrier()
    Path(f"{out}.{rank}").write_text(str(part.owned.numel()))
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    mp.start_processes(worker, args=(2, free, *sys.argv[1:]), nprocs=2, start_method="fork")
