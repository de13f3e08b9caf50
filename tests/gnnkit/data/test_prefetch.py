import json
import time
from pathlib import Path

import pytest
import torch
import torch_geometric

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.data.prefetch import DevicePrefetcher, cuda_tensors, tensors
from gnnkit.data.reuse import ReuseConfig
from gnnkit.data.sampler import neighbor_loader
from gnnkit.sparse import Adjacency
from pipeline.batch_cache import read_manifest
from tests.conftest import assert_same_batches

REPO = Path(__file__).parents[3]


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


def test_every_tensor_of_a_batch_is_found_for_the_training_streams_mark():
    """A tensor the walk missed would be handed back to the thread's stream while training still
    reads it: every store of Data and HeteroData, an Adjacency's arrays and conversions (whose
    cache refers back to it), mappings and sequences; each tensor once."""
    adj = Adjacency.from_edge_index(torch.tensor([[0, 1, 1], [1, 0, 1]]), 2)
    transposed, rows, counts = adj.t(), adj.rows(), adj.row_counts()
    nested = [torch.zeros(1), {"k": torch.ones(1), "n": 3}]
    data = torch_geometric.data.Data(x=torch.ones(3), adj=adj, meta=nested, size=3)
    expected = [data.x, adj.indptr, adj.indices, transposed.indptr, transposed.indices, rows, counts, *nested[:1],
                nested[1]["k"]]
    assert {id(t) for t in tensors(data)} == {id(t) for t in expected}
    assert len(list(tensors(data))) == len({id(t) for t in tensors(data)})  # each once
    hetero = torch_geometric.data.HeteroData()
    hetero["paper"].x = torch.ones(2, 3)
    hetero["paper", "cites", "paper"].edge_index = torch.zeros(2, 1, dtype=torch.long)
    assert {id(t) for t in tensors(hetero)} == {id(hetero["paper"].x), id(hetero["paper", "cites", "paper"].edge_index)}
    assert list(cuda_tensors(data)) == []  # none of them is on a GPU
    csr = torch.sparse_csr_tensor(adj.indptr, adj.indices, torch.ones(3), (2, 2))
    assert {id(t) for t in tensors([csr])} == {id(csr)}  # a sparse tensor is one item (cuda_tensors keeps dense ones)


class _Counting:
    """A loader of ``n`` integers that counts the batches it has made."""

    def __init__(self, n: int = 50) -> None:
        self.n, self.made = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.made += 1
            yield i


def test_a_stopped_pass_makes_no_further_batch_and_asks_for_none():
    """The thread stops once its pending batch is queued (it does not make one more), and the given-up
    pass's iterator ends instead of waiting for a batch that will never come."""
    loader = _Counting()
    wrapped = DevicePrefetcher(loader, "cpu", depth=2)
    it = iter(wrapped)
    assert [next(it), next(it)] == [0, 1]
    deadline = time.monotonic() + 10
    while loader.made < 5 and time.monotonic() < deadline:  # 2 handed out, 2 queued, 1 waiting to be
        time.sleep(0.01)
    wrapped.stop()
    assert loader.made == 5
    with pytest.raises(StopIteration):
        next(it)


def test_a_pass_makes_no_batch_beyond_the_trainers_limit_and_ends_the_loaders_pass():
    """Under limit_train_batches the thread stops at the limit (read when the pass starts) instead of
    making batches nobody trains on, and closes the loader's pass so it finishes what it began."""
    closed = []

    class Loader(_Counting):
        def __iter__(self):
            try:
                yield from super().__iter__()
            finally:
                closed.append(self.made)

    limit = [3]
    loader = Loader()
    wrapped = DevicePrefetcher(loader, "cpu", depth=4, limit=lambda: limit[0])
    limit[0] = 2  # the trainer sets its count after building the loader
    assert list(wrapped) == [0, 1] and loader.made == 2 and closed == [2]
    limit[0] = float("inf")
    assert len(list(wrapped)) == 50


def test_a_reuse_recording_under_prefetch_holds_the_batches_handed_out(tmp_path):
    """With batches made ahead, an epoch cut short by the trainer records just the batches it trained on."""
    config = ReuseConfig(epochs=3, feature_dtype="float32", loader="torch", workers=0, cache_dir=str(tmp_path / "c"))
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 5], reuse=config)
    recording = dm.train_dataloader()
    handed = list(DevicePrefetcher(recording, "cpu", depth=3, limit=lambda: 4))
    assert len(handed) == 4 and dm.reuse_stats.batches["recorded"] == 4
    assert read_manifest(recording.folder)["num_batches"] == 4  # published when the thread ended the pass


def test_a_run_that_max_steps_ends_within_its_recording_epoch_records_the_batches_trained_on(tmp_path, monkeypatch):
    """A fit whose max_steps ends it 5 batches into the recording epoch (of 7) records those 5, not
    the whole epoch the thread would make ahead (7 before the limit knew max_steps). Lightning on the
    CPU, with the datamodule's prefetcher as it wraps the loader on a GPU."""
    from gnnkit.resume import RUN_DIR_ENV
    from gnnkit.run import run

    def prefetched(self, stage, loader):
        self._prefetchers[stage] = DevicePrefetcher(loader, torch.device("cpu"), 3, limit=self._limit(stage),
                                                    state_source=self._samplers.get(stage))
        return self._prefetchers[stage]

    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    monkeypatch.setenv(RUN_DIR_ENV, "")  # `run` sets it for the ranks it starts
    monkeypatch.setattr(GraphDataModule, "_prefetched", prefetched)
    run_dir = tmp_path / "run"
    run(str(REPO / "recipes" / "quickstart.yaml"),
        ["--data.batch_size", "256", "--data.num_neighbors", "[4,4]", "--data.reuse.epochs", "2",
         "--data.reuse.loader", "torch", "--data.reuse.feature_dtype", "float32",
         "--data.reuse.cache_dir", str(tmp_path / "cache"), "--trainer.max_epochs", "3", "--trainer.max_steps", "5",
         "--run_dir", str(run_dir)])
    reuse = json.loads((run_dir / "report.json").read_text())["reuse"]
    assert reuse["batches"]["recorded"] == 5 and reuse["epochs"]["record"] == 1, reuse


def test_a_failed_fit_ends_the_threads(monkeypatch):
    """Lightning calls the datamodule's on_exception, not teardown, when a fit fails or is interrupted."""
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3])
    wrapped = DevicePrefetcher(_Counting(), "cpu", depth=2)
    it = iter(wrapped)
    next(it)
    dm._prefetchers["train"] = wrapped
    dm.on_exception(RuntimeError("a step failed"))
    assert wrapped._active is None and not it.thread.is_alive()


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
def test_every_cuda_tensor_of_a_device_batch_gets_the_training_streams_mark():
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], seed=3, sampler_device="cuda",
                         prefetch=0)
    batch = next(iter(dm.train_dataloader()))
    on_gpu = {id(v) for _, v in batch.items() if torch.is_tensor(v) and v.is_cuda}
    assert on_gpu and on_gpu <= {id(t) for t in cuda_tensors(batch)}


@pytest.mark.gpu
def test_a_checkpoint_takes_the_sampler_state_of_the_batches_handed_out():
    dm, _, _ = _device_batches(prefetch=3, steps=2)
    plain, _, _ = _device_batches(prefetch=0, steps=2)
    assert dm.report_info()["sampler"]["prefetch"] == 3
    assert torch.equal(dm._sampler_state("train")["generator"], plain._sampler_state("train")["generator"])


@pytest.mark.gpu
def test_the_training_stream_waits_for_a_batch_made_on_the_side_stream():
    """A batch's kernels queue on the thread's stream: the training stream must wait for its event,
    or it reads the tensor before the (slow) kernels that fill it have run."""
    class Slow:
        def __iter__(self):
            for _ in range(3):
                t = torch.zeros(1 << 20, device="cuda")
                torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time on the thread's stream
                yield t.fill_(1.0)

    for batch in DevicePrefetcher(Slow(), "cuda", depth=2):
        assert bool((batch.clone() == 1).all())  # the clone runs on the training stream


@pytest.mark.gpu
def test_a_batchs_memory_is_not_reused_by_the_thread_while_the_training_stream_reads_it():
    """Batches are allocated on the thread's stream: without record_stream a batch freed while the
    training stream still has a read of it queued goes back to the thread at once, and its next
    batch (same size) overwrites it before the read has run."""
    class Loader:
        def __iter__(self):
            yield torch.ones(1 << 20, device="cuda")
            for _ in range(3):
                yield torch.full((1 << 20,), 2.0, device="cuda")

    it = iter(DevicePrefetcher(Loader(), "cuda", depth=1))
    first = next(it)
    torch.cuda._sleep(100_000_000)  # the training stream is busy...
    out = first * 1  # ...so this read of the first batch waits behind it
    del first
    rest = [next(it) for _ in range(3)]  # the thread makes (allocates) its next batches meanwhile
    torch.cuda.synchronize()
    assert bool((out == 1).all()) and all(bool((b == 2).all()) for b in rest)
