"""Owner requests: in a world of one nothing travels; a bad owner is one line. (Across 2 gloo ranks
they carry the remote sampler's neighbour lists and the remote features: sampled_worker.py.)"""

from __future__ import annotations

import pytest
import torch

from gnnkit.partitioned.owner_requests import OwnerRequests, world_and_rank


def test_a_world_of_one_asks_nobody():
    empty = torch.zeros(0, dtype=torch.int64)
    requests = OwnerRequests.exchange(empty, empty)
    assert world_and_rank() == (1, 0) and requests.num_asked == 0 and requests.requested.numel() == 0
    assert requests.received_rows(torch.zeros(0, 3)).shape == (0, 3)
    lengths, values = requests.answer_lists(empty, torch.zeros(0, 2, dtype=torch.int64))
    assert lengths.numel() == 0 and values.shape == (0, 2)


def test_asking_oneself_or_outside_the_world_is_refused():
    with pytest.raises(ValueError, match=r"owners: expected other ranks of a world of 1, got \[0\] on rank 0"):
        OwnerRequests.exchange(torch.tensor([4]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"got \[3\]"):
        OwnerRequests.exchange(torch.tensor([4]), torch.tensor([3]))
