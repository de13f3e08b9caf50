"""DALI and torch shard readers: same bytes, same order; missing files come back empty."""

import threading

import numpy as np
import pytest
import torch

from pipeline.shard_reader import DaliShardReader, TorchShardReader, dali_available, make_shard_reader, read_ahead

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
