"""Partition-parallel training: each rank holds one METIS partition and exchanges halo rows."""

from gnnkit.partitioned.halo import HaloPlan, halo_exchange
from gnnkit.partitioned.local_graph import local_adjacency

__all__ = ["HaloPlan", "halo_exchange", "local_adjacency"]
