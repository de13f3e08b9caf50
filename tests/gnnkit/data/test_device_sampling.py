import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.data.device_sampling import (
    SamplingPlacement,
    check_sampler_device,
    plan_placement,
    resolve_sampler_device,
)

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)  # a device object needs no GPU
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the GPU path is checked on a GPU machine")
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")


def test_a_bad_choice_names_the_option():
    with pytest.raises(ValueError, match=r"data.sampler_device: expected one of \['auto', 'cpu', 'cuda'\], got 'gpu'"):
        check_sampler_device("gpu")


def test_auto_follows_the_training_device():
    assert resolve_sampler_device("auto", CPU) == CPU
    assert resolve_sampler_device("cpu", GPU) == CPU


@NO_CUDA
def test_cuda_without_a_gpu_fails_with_one_line():
    with pytest.raises(ValueError, match="data.sampler_device: 'cuda' needs a CUDA device"):
        resolve_sampler_device("cuda", CPU)
    with pytest.raises(ValueError, match="data.sampler_device: 'cuda' needs a CUDA device"):
        GraphDataModule("synthetic-tiny", batch_size=64, sampler_device="cuda")


def test_the_graph_goes_to_the_device_when_it_fits():
    graph = [torch.zeros(1000, dtype=torch.int64), None, torch.zeros(10, 4)]  # 8,160 bytes
    placed = plan_placement(graph, GPU, free_bytes=1 << 20)
    assert (placed.device, placed.graph_memory, placed.graph_bytes) == ("cuda:0", "device", 8160)
    too_big = plan_placement(graph, GPU, free_bytes=10_000)  # 8,160 > half of 10,000
    assert (too_big.device, too_big.graph_memory) == ("cpu", "host")
    assert "does not fit" in too_big.reason
    on_cpu = plan_placement(graph, CPU, asked="cpu")
    assert on_cpu.reason == "sampling on the CPU (data.sampler_device is 'cpu')"


def test_training_on_the_cpu_samples_there_and_the_report_says_so():
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3])
    next(iter(dm.train_dataloader()))
    assert dm.report_info()["sampler"]["device"] == "cpu"
    assert dm.report_info()["sampler"]["graph_memory"] == "host"


def _batches(dm: GraphDataModule) -> list:
    return [(b.n_id, b.edge_index, b.x, b.y) for b in dm.train_dataloader()]


def test_the_device_resident_path_samples_what_the_host_path_samples(monkeypatch):
    """The code path a GPU takes (copies of the graph, sampling in the training process), run with the
    CPU as the device: the batches are those of the host path with the same seed."""
    host = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3)
    on_device = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3, num_workers=2)
    monkeypatch.setattr(on_device, "_placement", SamplingPlacement("cpu", "device", 0, "test: the CPU as a device"))
    torch.manual_seed(0)
    expected = _batches(host)
    torch.manual_seed(0)
    got = _batches(on_device)
    assert on_device._device_graph is not None and on_device._device_graph["x"] is not on_device.graph.x
    assert on_device.train_dataloader().num_workers == 0  # device sampling runs in the training process
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        for ta, tb in zip(a, b):
            assert torch.equal(ta, tb)


@CUDA
def test_sampling_on_the_gpu_gives_device_batches_with_valid_edges():
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], sampler_device="cuda")
    g = dm.graph
    for batch in dm.train_dataloader():
        assert batch.x.is_cuda and batch.edge_index.is_cuda and batch.n_id.is_cuda
        n_id, (src, dst) = batch.n_id.cpu(), batch.edge_index.cpu()
        torch.testing.assert_close(batch.x.cpu(), g.x[n_id])
        for s, d in zip(n_id[src].tolist(), n_id[dst].tolist()):  # every sampled edge is an edge of the graph
            assert s in g.indices[g.indptr[d]:g.indptr[d + 1]].tolist()
    assert dm.report_info()["sampler"]["graph_memory"] == "device"
