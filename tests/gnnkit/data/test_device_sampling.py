from types import SimpleNamespace

import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.data import datamodule as datamodule_module
from gnnkit.data.device_sampling import (
    SamplingPlacement,
    check_sampler_device,
    cuda_array_interface,
    host_fallback,
    plan_placement,
    resolve_sampler_device,
    uva_view,
)
from tests.conftest import assert_same_batches

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)  # a device object needs no GPU
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
    graph = {"indptr": torch.zeros(1000, dtype=torch.int64), "indices": None, "x": torch.zeros(10, 4)}  # 8,160 B
    placed = plan_placement(graph, GPU, free_bytes=1 << 20)
    assert (placed.device, placed.graph_memory, placed.graph_bytes) == ("cuda:0", "device", 8160)
    assert placed.arrays == {"indptr": "device", "x": "device"}
    on_cpu = plan_placement(graph, CPU, asked="cpu")
    assert on_cpu.reason == "sampling on the CPU (data.sampler_device is 'cpu')" and on_cpu.arrays == {}


def test_what_does_not_fit_is_read_from_pinned_host_memory():
    graph = {"x": torch.zeros(1000, 10), "y": torch.zeros(1000, dtype=torch.int64),
             "indptr": torch.zeros(1001, dtype=torch.int64), "indices": torch.zeros(5000, dtype=torch.int64)}
    csr_and_labels = 8 * (1001 + 5000 + 1000)  # 56,008 bytes; the features 40,000 more
    part = plan_placement(graph, GPU, free_bytes=2 * csr_and_labels)  # half the free memory: CSR and labels
    assert part.arrays == {"indptr": "device", "indices": "device", "y": "device", "x": "pinned"}
    assert part.device == "cuda:0" and part.graph_memory == "device+pinned"
    assert "x (0.00 GiB) in pinned host memory read through unified addressing" in part.reason
    assert part.report()["arrays"]["x"] == "pinned"
    nothing = plan_placement(graph, GPU, free_bytes=1000)
    assert nothing.graph_memory == "pinned" and set(nothing.arrays.values()) == {"pinned"}
    # pinning locks whole power-of-two blocks: 40,000 bytes of features lock 65,536
    assert plan_placement(graph, GPU, free_bytes=2 * csr_and_labels, host_bytes=2 * 65536).graph_memory == "device+pinned"
    refused = plan_placement(graph, GPU, free_bytes=2 * csr_and_labels, host_bytes=2 * 65536 - 2)
    assert (refused.device, refused.graph_memory) == ("cpu", "host")
    assert "pinning the rest would lock 0.00 GiB, over 50% of the host's available" in refused.reason
    fallback = host_fallback(part, RuntimeError("cudaHostAlloc: out of memory"))
    assert (fallback.device, fallback.graph_memory) == ("cpu", "host")
    assert "for cuda:0 (device+pinned) failed (cudaHostAlloc: out of memory)" in fallback.reason


def test_pinned_views_are_refused_for_what_unified_addressing_cannot_read():
    t = torch.arange(12, dtype=torch.int64)
    interface = cuda_array_interface(t)
    assert interface["shape"] == (96,) and interface["typestr"] == "|u1" and interface["data"] == (t.data_ptr(), False)
    with pytest.raises(ValueError, match="reads host memory from a CUDA device, not cpu"):
        uva_view(t, CPU)
    with pytest.raises(ValueError, match=r"needs a contiguous pinned host tensor \(tensor.pin_memory\(\)\)"):
        uva_view(t, GPU)  # not pinned (and no GPU needed to say so)


def test_a_failed_pin_falls_back_to_sampling_on_the_cpu(monkeypatch):
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3])
    planned = SamplingPlacement("cuda:0", "pinned", 100, "test", {"indptr": "pinned", "indices": "pinned",
                                                                  "x": "pinned", "y": "pinned"})
    monkeypatch.setattr(dm, "_placement", planned)

    def refuse(tensor, where, device):
        raise RuntimeError("cudaHostAlloc failed")

    monkeypatch.setattr(datamodule_module, "place", refuse)
    batch = next(iter(dm.train_dataloader()))
    assert batch.x.device.type == "cpu" and dm._device_graph is None
    info = dm.report_info()["sampler"]
    assert info["graph_memory"] == "host" and "placing the graph" in info["reason"]
    assert "cudaHostAlloc failed" in info["reason"]


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
    assert_same_batches(got, expected)


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_a_pinned_view_reads_host_memory_from_the_gpu():
    host = torch.randn(1000, 16).pin_memory()
    view = uva_view(host, GPU)
    assert view.is_cuda and view.shape == host.shape and view.dtype == host.dtype
    assert view.data_ptr() == host.data_ptr()  # no copy: the same memory through unified addressing
    index = torch.randint(0, 1000, (300,), device=GPU)
    torch.testing.assert_close(view[index].cpu(), host[index.cpu()])
    host[7] = 3.0  # a write on the host is seen by the GPU
    assert float(view[7].sum()) == 48.0
    ids = torch.arange(50, dtype=torch.int64).pin_memory()
    assert torch.equal(uva_view(ids, GPU).cpu(), ids)


@pytest.mark.gpu
def test_sampling_through_unified_addressing_gives_the_device_batches(monkeypatch):
    on_device = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3, sampler_device="cuda")
    pinned = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3, sampler_device="cuda")
    g = pinned.graph
    csr_bytes = (g.indptr.numel() + g.indices.numel()) * 8
    monkeypatch.setattr("gnnkit.data.device_sampling.free_device_bytes", lambda device: 2 * csr_bytes + 1)
    torch.manual_seed(0)
    got = _batches(pinned)
    monkeypatch.undo()
    torch.manual_seed(0)
    expected = _batches(on_device)
    info = pinned.report_info()["sampler"]
    assert info["graph_memory"] == "device+pinned" and info["arrays"]["x"] == "pinned", info
    assert pinned._device_graph["x"].is_cuda and pinned._device_graph["x"].data_ptr() != on_device._device_graph["x"].data_ptr()
    assert_same_batches(got, expected, cuda=True)


@pytest.mark.gpu
def test_full_batch_stages_share_one_device_copy_of_the_graph():
    """Full-batch training on a GPU moves the graph once a run: the train and validation batches
    hold the same device tensors (and adjacency), so the batch transfer moves nothing more."""
    dm = GraphDataModule("synthetic-tiny", batch_size=0)
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=GPU))
    train, val = next(iter(dm.train_dataloader())), next(iter(dm.val_dataloader()))
    assert train.x.is_cuda and train.x.data_ptr() == val.x.data_ptr() and train.y.data_ptr() == val.y.data_ptr()
    assert train.adj is val.adj and train.adj.indptr.is_cuda
    assert train.to(GPU).x.data_ptr() == val.x.data_ptr()


@pytest.mark.gpu
def test_the_pytorch_sampler_on_the_gpu_follows_the_cpu_generator(monkeypatch):
    """Without the CUDA sampler the PyTorch hops run on the GPU, their generator re-seeded from the
    sampler's CPU one (no host sync for a seed): the same seed gives the same valid batches."""
    monkeypatch.setattr("gnnkit.native.ops._native_graph", lambda sampler, sources_are_rows=True: False)
    runs = []
    for _ in range(2):
        dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3, sampler_device="cuda",
                             prefetch=0)
        torch.manual_seed(0)
        runs.append(_batches(dm))
    assert dm._samplers["train"]._generator.device.type == "cpu"
    assert_same_batches(*runs, cuda=True)
    g = dm.graph
    for batch in runs[0]:
        n_id, (src, dst) = batch[0].cpu(), batch[1].cpu()
        for s, d in zip(n_id[src].tolist(), n_id[dst].tolist()):
            assert s in g.indices[g.indptr[d]:g.indptr[d + 1]].tolist()
