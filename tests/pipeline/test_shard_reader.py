"""DALI and torch shard readers: same bytes, same order; missing files come back empty. The resident
reader serves shards it kept without reading them again."""

import threading

import numpy as np
import pytest
import torch

from pipeline.shard_reader import (DaliShardReader, ResidentShardReader, TorchShardReader, dali_available,
                                   make_shard_reader, read_ahead)

needs_dali = pytest.mark.skipif(not dali_available(), reason="nvidia-dali is not installed")


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(5):
        path = tmp_path / f"s{i}.bin"
        rng.integers(0, 256, 1000 + 37 * i, dtype=np.uint8).tofile(path)
        paths.append(path)
    return paths + [tmp_path / "missing.bin"]


def _read_all(reader, paths, order):
    return [(i, b.clone()) for i, b in reader.read(paths, order)]


@pytest.mark.parametrize("reader", [
    TorchShardReader(num_workers=0),
    TorchShardReader(num_workers=2),
    pytest.param("dali", marks=needs_dali),
])
def test_reader_yields_files_in_the_given_order(files, reader):
    reader = DaliShardReader(num_threads=2) if reader == "dali" else reader
    order = [3, 5, 0, 4, 1, 2, 3]
    got = _read_all(reader, files, order)
    assert [i for i, _ in got] == order
    for i, data in got:
        expected = files[i].read_bytes() if files[i].exists() else b""
        assert data.dtype == torch.uint8 and bytes(data.numpy()) == expected


@needs_dali
def test_dali_and_torch_give_the_same_bytes(files):
    order = [4, 2, 0]
    a = _read_all(DaliShardReader(), files, order)
    b = _read_all(TorchShardReader(), files, order)
    assert all(i == j and torch.equal(x, y) for (i, x), (j, y) in zip(a, b))


def test_make_shard_reader_choices():
    assert make_shard_reader("torch").name == "torch"
    assert make_shard_reader("auto").name == "torch"  # on CPU: the zero-copy reader measured faster
    if dali_available():
        assert make_shard_reader("dali").name == "dali"
    with pytest.raises(ValueError, match="loader: expected 'auto', 'dali' or 'torch'"):
        make_shard_reader("nvme")


def test_the_torch_reader_for_a_gpu_is_made_for_the_device():
    reader = make_shard_reader("torch", device="cuda")
    assert reader.name == "torch" and reader.device == "cuda"
    if not dali_available():  # without DALI, a GPU run replays through the torch reader's pinned copies
        assert make_shard_reader("auto", device="cuda").name == "torch"


@pytest.mark.gpu
@pytest.mark.parametrize("workers", [0, 2])
def test_the_torch_reader_hands_shards_over_on_the_gpu(files, workers):
    order = [3, 5, 0, 4]
    on_gpu = _read_all(TorchShardReader(num_workers=workers, device="cuda"), files, order)
    on_cpu = _read_all(TorchShardReader(), files, order)
    assert [i for i, _ in on_gpu] == order
    for (_, gpu), (_, cpu) in zip(on_gpu, on_cpu):
        assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "shard-read-ahead"]


def test_read_ahead_keeps_the_order_and_raises_the_producers_error():
    assert list(read_ahead(iter(range(50)), 3)) == list(range(50))

    def failing():
        yield from (1, 2)
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for item in read_ahead(failing(), 2):
            got.append(item)
    assert got == [1, 2] and not _ahead_threads()


def test_read_ahead_stops_its_thread_when_the_consumer_stops_early():
    pulled = []

    def shards():
        for i in range(1000):
            pulled.append(i)
            yield i

    ahead = read_ahead(shards(), 2)
    assert [next(ahead) for _ in range(3)] == [0, 1, 2]
    ahead.close()
    assert not _ahead_threads() and len(pulled) <= 3 + 2 + 2  # what was taken, the queue, one in hand


class _Counting:
    """A reader that records which shards it was asked to read."""

    name = "counting"

    def __init__(self, reader):
        self.reader, self.asked = reader, []

    def read(self, paths, order):
        self.asked.append(list(order))
        yield from self.reader.read(paths, order)


def test_a_resident_reader_reads_each_shard_once_and_serves_the_same_bytes(files):
    inner = _Counting(TorchShardReader())
    resident = ResidentShardReader(inner, budget_bytes=10**6)
    order = [3, 5, 0, 4]
    first, second = _read_all(resident, files, order), _read_all(resident, files, [0, 4, 3, 5, 1])
    assert [i for i, _ in first] == order and [i for i, _ in second] == [0, 4, 3, 5, 1]
    for i, data in first + second:
        assert bytes(data.numpy()) == (files[i].read_bytes() if files[i].exists() else b"")
    assert inner.asked == [order, [5, 1]]  # the missing file is never kept; shard 1 was not read before
    assert resident.kept_bytes == sum(files[i].stat().st_size for i in (3, 0, 4, 1))


def test_a_resident_reader_keeps_what_fits_and_rereads_a_rewritten_shard(files):
    inner = _Counting(TorchShardReader())
    size = files[0].stat().st_size
    resident = ResidentShardReader(inner, budget_bytes=size + files[1].stat().st_size - 1)
    list(resident.read(files, [0, 1]))
    list(resident.read(files, [0, 1]))
    assert inner.asked[1] == [1]  # shard 0 fits the budget, shard 1 does not
    files[0].write_bytes(b"a new recording")  # published anew: another file
    (got,) = [bytes(b.numpy()) for _, b in resident.read(files, [0])]
    assert got == b"a new recording" and inner.asked[2] == [0]
    assert resident.kept_bytes == len(b"a new recording")  # the old bytes of that path are let go
    resident.clear()
    list(resident.read(files, [2]))
    assert resident.kept_bytes == files[2].stat().st_size and inner.asked[3] == [2]


def test_a_resident_reader_stops_its_readers_read_ahead_when_the_consumer_stops(files):
    resident = ResidentShardReader(TorchShardReader(device="cpu"), budget_bytes=0)
    shards = resident.read(files, [0, 1, 2, 3])
    next(shards)
    shards.close()
    assert not _ahead_threads()


@pytest.mark.gpu
def test_a_resident_reader_keeps_the_gpu_copies(files):
    resident = ResidentShardReader(TorchShardReader(device="cuda"), budget_bytes=10**6)
    first = _read_all(resident, files, [2, 0])
    again = list(resident.read(files, [0, 2]))
    assert all(b.is_cuda for _, b in again) and resident.kept_bytes > 0
    assert torch.equal(dict(again)[2].cpu(), dict(first)[2].cpu())
