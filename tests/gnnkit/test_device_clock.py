import torch

from gnnkit import device_clock as clock


def test_a_cuda_device_is_synchronised_before_the_clock_is_read(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    first = clock.device_clock(None)
    assert clock.device_clock(torch.device("cpu")) >= first and synced == []
    assert clock.device_clock(torch.device("cuda", 0)) >= first and synced == [torch.device("cuda", 0)]
