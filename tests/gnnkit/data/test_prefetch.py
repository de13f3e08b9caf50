import pytest
import torch
import torch_geometric

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.data.prefetch import DevicePrefetcher, cuda_tensors
from gnnkit.data.sampler import neighbor_loader
from tests.conftest import assert_same_batches


def _loader(shuffle: bool = False):
    """gnnkit's sampled loader over a random 200-node graph, drawing from a seeded private generator."""
    g = torch.Generator().manual_seed(0)
    n = 200
    dst, order = torch.randint(0, n, (1500,), generator=g).sort()
    src = torch.randint(0, n, (1500,), generator=g)[order]
    indptr = torch.zeros(n + 1, dtype=torch.long)
    indptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    data = torch_geometric.data.Data(x=torch.randn(n, 4, generator=g), y=torch.arange(n), num_nodes=n)
    return neighbor_loader(data, indptr, src, [3, 2], input_nodes=None, batch_size=32, shuffle=shuffle, seed=5)


def _ids(batches):
    return [(b.n_id.tolist(), b.edge_index.tolist()) for b in batches]


def test_the_batches_and_their_order_are_the_loaders():
    plain, ahead = _loader(), _loader()
    wrapped = DevicePrefetcher(ahead, "cpu", depth=2, state_source=ahead.node_sampler)
    assert len(wrapped) == len(plain) and wrapped.node_sampler is ahead.node_sampler  # attributes reach the loader
    for _ in range(2):  # two passes (epochs): the second continues the sampler's stream as the plain one does
        assert _ids(wrapped) == _ids(plain)


def test_a_pass_given_up_undraws_the_batches_made_ahead():
    """Lightning gives passes up (its iterable check, the sanity check, limit_train_batches): the
    sampler is put back to the last batch handed out, so what follows is what the plain loader gives."""
    plain, ahead = _loader(), _loader()
    wrapped = DevicePrefetcher(ahead, "cpu", depth=3, state_source=ahead.node_sampler)
    expected_it, got_it = iter(plain), iter(wrapped)
    for _ in range(2):
        assert _ids([next(got_it)]) == _ids([next(expected_it)])
    assert torch.equal(wrapped.sampler_state()["generator"], plain.node_sampler.state_dict()["generator"])
    iter(wrapped)  # the first pass is abandoned, with batches made ahead
    assert torch.equal(ahead.node_sampler.state_dict()["generator"], plain.node_sampler.state_dict()["generator"])
    assert _ids(wrapped) == _ids(plain)


def test_an_error_in_the_loader_is_raised_where_its_batch_was_asked_for():
    def failing():
        yield 1
        yield 2
        raise RuntimeError("sampler broke at batch 3")

    class Loader:
        def __iter__(self):
            return failing()

    it = iter(DevicePrefetcher(Loader(), "cpu", depth=2))
    assert [next(it), next(it)] == [1, 2]
    with pytest.raises(RuntimeError, match="sampler broke at batch 3"):
        next(it)
    with pytest.raises(StopIteration):  # finished: asking again does not wait forever
        next(it)


def test_options_are_checked():
    with pytest.raises(ValueError, match="data.prefetch: expected batches made ahead >= 1"):
        DevicePrefetcher([], "cpu", depth=0)
    with pytest.raises(ValueError, match="data.prefetch: expected batches made ahead >= 0"):
        GraphDataModule("synthetic-tiny", batch_size=64, prefetch=-1)


def test_sampling_on_the_cpu_is_not_wrapped():
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3])
    assert not isinstance(dm.train_dataloader(), DevicePrefetcher)
    assert dm.report_info()["sampler"]["prefetch"] == 0


def test_cuda_tensors_walks_batches():
    data = torch_geometric.data.Data(x=torch.ones(2), meta=[torch.zeros(1)])
    assert list(cuda_tensors(data)) == [] and list(cuda_tensors((torch.ones(1), {"a": 1}))) == []


def _device_batches(prefetch: int, steps: int | None = None):
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3, sampler_device="cuda",
                         prefetch=prefetch)
    torch.manual_seed(0)
    loader = dm.train_dataloader()
    batches = [b for _, b in zip(range(steps), loader)] if steps else list(loader)
    return dm, loader, [(b.n_id, b.edge_index, b.x, b.y) for b in batches]


@pytest.mark.gpu
def test_prefetched_device_batches_are_those_made_on_demand():
    _, loader, got = _device_batches(prefetch=2)
    _, _, expected = _device_batches(prefetch=0)
    assert isinstance(loader, DevicePrefetcher) and loader.stream is not None
    assert_same_batches(got, expected, cuda=True)


@pytest.mark.gpu
def test_a_checkpoint_takes_the_sampler_state_of_the_batches_handed_out():
    dm, _, _ = _device_batches(prefetch=3, steps=2)
    plain, _, _ = _device_batches(prefetch=0, steps=2)
    assert dm.report_info()["sampler"]["prefetch"] == 3
    assert torch.equal(dm._sampler_state("train")["generator"], plain._sampler_state("train")["generator"])
