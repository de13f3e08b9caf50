"""The sampled-batch cache: shard layout, bit-identical round trip, budget, refusal, corruption."""

import json
import shutil

import pytest
import torch

from pipeline.batch_cache import (
    BatchCacheWriter,
    BatchRecord,
    CorruptShard,
    decode_shard,
    disk_headroom,
    encode_shard,
    open_batch_cache,
)
from pipeline.errors import DatasetError

INPUTS = {"graph": "abc", "num_neighbors": [5, 5], "batch_size": 4}


def _record(seed: int, nodes: int = 30, features: int = 6) -> BatchRecord:
    g = torch.Generator().manual_seed(seed)
    return BatchRecord(
        arrays={
            "x": torch.randn(nodes, features, generator=g),
            "y": torch.randint(0, 5, (nodes,), generator=g),
            "edge_index": torch.randint(0, nodes, (2, 3 * nodes), generator=g),
            "big": torch.tensor([2**40, -1, 0]),  # does not fit int32: stays int64
            "mask": torch.rand(nodes, generator=g) > 0.5,
            "half": torch.randn(3, 2, generator=g).to(torch.bfloat16),
            "empty": torch.zeros(0, 3),
        },
        meta={"batch_size": 4, "num_sampled_nodes": [4, 10, 16], "name": f"b{seed}"},
    )


def _join(pieces) -> torch.Tensor:
    return torch.frombuffer(bytearray(b"".join(bytes(p) for p in pieces)), dtype=torch.uint8)


def _assert_same(a: BatchRecord, b: BatchRecord) -> None:
    assert a.meta == b.meta
    assert a.arrays.keys() == b.arrays.keys()
    for name in a.arrays:
        assert a.arrays[name].dtype == b.arrays[name].dtype, name
        assert a.arrays[name].shape == b.arrays[name].shape, name
        assert torch.equal(a.arrays[name], b.arrays[name]), name


def test_shard_round_trip_is_bit_identical():
    records = [_record(i) for i in range(3)]
    decoded = decode_shard(_join(encode_shard(records, lossy={})))
    assert len(decoded) == 3
    for a, b in zip(records, decoded):
        _assert_same(a, b)


def test_int64_is_narrowed_on_disk_and_float16_features_are_lossy_but_close():
    record = _record(0, nodes=2000)
    lossless = _join(encode_shard([record], lossy={})).numel()
    lossy = _join(encode_shard([record], lossy={"x": torch.float16}))
    assert lossy.numel() < lossless
    back = decode_shard(lossy)[0]
    assert back.arrays["x"].dtype == torch.float32
    assert torch.allclose(back.arrays["x"], record.arrays["x"], atol=1e-2, rtol=1e-3)
    assert torch.equal(back.arrays["edge_index"], record.arrays["edge_index"])
    assert back.arrays["edge_index"].dtype == torch.int64


def test_garbage_is_not_a_shard():
    with pytest.raises(CorruptShard, match="gnnkit batch shard"):
        decode_shard(torch.zeros(100, dtype=torch.uint8))


def _write(path, count: int, **kwargs):
    with BatchCacheWriter(path, INPUTS, **kwargs) as writer:
        for i in range(count):
            writer.add(_record(i), seeds=torch.arange(4) + 4 * i)
    return writer


def test_writer_makes_fixed_size_shards_and_publishes_atomically(tmp_path):
    path = tmp_path / "c"
    _write(path, 10, shard_mb=0.002)  # ~2 KiB shards: a few batches each
    cache = open_batch_cache(path, INPUTS)
    assert cache.num_batches == 10 and len(cache.shards) > 2
    assert sum(s["batches"] for s in cache.shards) == 10
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    assert torch.equal(cache.seeds(7), torch.arange(28, 32))
    replayed = [r for s in range(len(cache.shards)) for r in cache.decode(s, cache.read_shard(s))]
    for i, record in enumerate(replayed):
        _assert_same(record, _record(i))


def test_a_shard_decodes_with_its_header_read_from_the_file(tmp_path):
    """Bytes on a GPU are decoded with the header the cache reads from the file on the host (a read
    of the device buffer would wait for the GPU): the same batches either way."""
    path = tmp_path / "c"
    _write(path, 6, shard_mb=0.002)
    cache = open_batch_cache(path, INPUTS)
    for shard in range(len(cache.shards)):
        buffer = cache.read_shard(shard)
        head = cache.read_head(shard)
        assert bytes(buffer[:len(head)].numpy()) == head
        assert cache.read_head(shard, buffer.numpy()) == head  # from the bytes a CRC check read already
        for a, b in zip(decode_shard(buffer, head=head), decode_shard(buffer)):
            _assert_same(a, b)
    with pytest.raises(CorruptShard, match="gnnkit batch shard"):
        decode_shard(cache.read_shard(0), head=b"not a shard")


def test_a_device_buffers_first_check_reads_its_file_once(tmp_path, monkeypatch):
    """A buffer off the CPU (a meta tensor stands in for the GPU here) is checked against its file's
    CRC, and the header is taken from those bytes: one read of the file, not two. Once verified, only
    the header is read."""
    path = tmp_path / "c"
    _write(path, 6, shard_mb=0.002)
    cache = open_batch_cache(path, INPUTS)
    reads, heads = [], []
    read_bytes, read_head = cache.read_bytes, cache.read_head
    monkeypatch.setattr(cache, "read_bytes", lambda shard: reads.append(shard) or read_bytes(shard))
    monkeypatch.setattr(cache, "read_head", lambda shard, data=None: heads.append(data is not None)
                        or read_head(shard, data))
    device_bytes = torch.empty(cache.shards[0]["bytes"], dtype=torch.uint8, device="meta")
    assert cache.check(0, cache.read_shard(0)) is None and reads == [0]  # host bytes: checked in place
    assert read_head(0, cache.check(0, device_bytes)) == read_head(0) and reads == [0, 0]
    cache.verified.clear()  # a run's first replay of the shard
    for _ in range(2):
        assert len(cache.decode(0, device_bytes, verify="once")) == cache.shards[0]["batches"]
    assert reads == [0, 0, 0] and heads == [True, False]


def test_failed_writer_leaves_nothing_and_keeps_the_old_cache(tmp_path):
    path = tmp_path / "c"
    _write(path, 2)
    with pytest.raises(RuntimeError):
        with BatchCacheWriter(path, INPUTS) as writer:
            writer.add(_record(5), seeds=torch.arange(4))
            raise RuntimeError("killed")
    assert open_batch_cache(path, INPUTS).num_batches == 2
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_a_failed_background_write_is_raised_and_nothing_is_published(tmp_path):
    import shutil

    path = tmp_path / "c"
    writer = BatchCacheWriter(path, INPUTS, shard_mb=0.002)
    shutil.rmtree(writer.tmp)  # the disk goes away under the writer thread
    with pytest.raises(FileNotFoundError):
        for i in range(10):
            writer.add(_record(i), seeds=torch.arange(4))  # a later flush raises the earlier failure
        writer.close()  # or the close
    assert not path.exists() and not list(tmp_path.iterdir())


def test_disk_budget_stops_recording(tmp_path):
    writer = _write(tmp_path / "c", 20, shard_mb=0.001, budget_mb=0.01)
    cache = open_batch_cache(tmp_path / "c", INPUTS)
    assert 0 < cache.num_batches < 20 and writer.full
    assert cache.num_bytes <= 0.01 * 2**20
    assert cache.manifest["truncated_by_budget"] and cache.manifest["batches_not_cached"] == 20 - cache.num_batches


def test_a_nearly_full_disk_still_takes_a_small_cache(tmp_path, monkeypatch):
    """The writer leaves a share of the free space unused, not a fixed GiB: with 300 MiB free (as a
    crowded CI disk had), 270 MiB may be cached; with 20 GiB free, all but 1 GiB."""
    assert disk_headroom(300 * 2**20) == 30 * 2**20 and disk_headroom(20 * 2**30) == 2**30
    usage = shutil.disk_usage(tmp_path)._replace(free=300 * 2**20)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    writer = _write(tmp_path / "c", 3)
    assert writer.budget == 270 * 2**20 and open_batch_cache(tmp_path / "c", INPUTS).num_batches == 3


@pytest.mark.parametrize("field,value", [("graph", "other"), ("num_neighbors", [10, 5]), ("batch_size", 8)])
def test_cache_for_another_graph_or_sampler_is_refused(tmp_path, field, value):
    _write(tmp_path / "c", 1)
    with pytest.raises(DatasetError, match=f"made for {field}=.*refusing to replay") as err:
        open_batch_cache(tmp_path / "c", {**INPUTS, field: value})
    assert "manifest.json" in str(err.value) and "\n" not in str(err.value)


def test_corrupt_and_truncated_shards_are_detected(tmp_path):
    _write(tmp_path / "c", 2)
    cache = open_batch_cache(tmp_path / "c", INPUTS)
    file = cache.shard_path(0)
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(CorruptShard, match="CRC-32"):
        cache.decode(0, cache.read_shard(0))
    file.write_bytes(bytes(data[:100]))
    with pytest.raises(CorruptShard, match="truncated"):
        cache.decode(0, cache.read_shard(0))
    file.unlink()
    with pytest.raises(CorruptShard):
        cache.decode(0, cache.read_shard(0))


def test_manifest_records_the_inputs(tmp_path):
    _write(tmp_path / "c", 1)
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["inputs"] == INPUTS and manifest["num_batches"] == 1


@pytest.mark.gpu
def test_gpu_arrays_are_copied_after_the_work_that_made_them_off_the_default_stream(tmp_path):
    """The writer's thread copies a shard's GPU arrays on a stream of its own (the default stream is
    the training loop's), after the work that made them on the stream that called ``add``: here a
    float array (no int32 check, which would wait for the GPU) filled behind tens of milliseconds of
    GPU time on a side stream."""
    side = torch.cuda.Stream()
    with BatchCacheWriter(tmp_path / "c", INPUTS, shard_mb=0.001) as writer, torch.cuda.stream(side):
        for i in range(3):
            x = torch.zeros(1 << 18, device="cuda")
            torch.cuda._sleep(50_000_000)
            writer.add(BatchRecord({"x": x.fill_(float(i + 1))}, {}), seeds=torch.arange(1))
    cache = open_batch_cache(tmp_path / "c", INPUTS)
    got = [r.arrays["x"] for s in range(len(cache.shards)) for r in cache.decode(s, cache.read_shard(s))]
    assert [float(x.min()) for x in got] == [1.0, 2.0, 3.0] and [float(x.max()) for x in got] == [1.0, 2.0, 3.0]
    assert set(writer._streams) == {torch.device("cuda", torch.cuda.current_device())}


def test_a_recording_s_temp_names_its_process_so_a_killed_one_is_stale_at_once(tmp_path):
    """It was `.tmp-<key>-<random>`, with no owner: a reuse run killed while recording left its shards
    (31 MB on a tiny graph) hidden for two days, unlisted by `cache list`, kept by `cache clear`."""
    import os

    from pipeline import temp_paths

    dead = tmp_path / f".c{temp_paths.MARK}999999999@{temp_paths._host()}.x"  # a killed recorder's
    dead.mkdir()
    writer = BatchCacheWriter(tmp_path / "c", INPUTS)
    try:
        assert temp_paths.owner_of(writer.tmp).pid == os.getpid() and writer.tmp.parent == tmp_path
        assert not dead.exists()  # removed as stale by the next recording beside it
    finally:
        writer.abort()
    assert temp_paths.stale_temps(tmp_path) == []
