"""gnnkit/data/eval_shards.py: on several ranks an evaluation split is dealt without repeats."""

from __future__ import annotations

import torch.distributed as dist

from gnnkit.data.eval_shards import eval_limit, eval_shards


def _on_rank(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)


def test_every_item_is_on_one_rank_and_none_twice(monkeypatch):
    """Lightning's DistributedSampler padded 7 items to 8 on 2 ranks: item 0 was scored twice."""
    shares = []
    for rank in range(2):
        _on_rank(monkeypatch, rank, 2)
        shares.append(list(eval_shards(7)))
    assert shares == [[0, 2, 4, 6], [1, 3, 5]]


def test_one_process_or_fewer_items_than_ranks_keep_lightnings_sampler(monkeypatch):
    assert eval_shards(7) is None  # no process group
    _on_rank(monkeypatch, 0, 4)
    assert eval_shards(3) is None  # a rank without a batch would stall DDP's first evaluation step
    _on_rank(monkeypatch, 0, 1)
    assert eval_shards(3) is None


def test_a_fractional_batch_limit_keeps_lightnings_sampler(monkeypatch):
    """Uneven shares under limit_val_batches 0.1 could leave one rank no batch: it raised while the
    others went on into a collective and hung."""
    from types import SimpleNamespace

    _on_rank(monkeypatch, 0, 2)
    trainer = SimpleNamespace(limit_val_batches=0.1, limit_test_batches=1.0)
    assert eval_shards(70, eval_limit(trainer, "val")) is None
    assert eval_shards(70, eval_limit(trainer, "test")) is not None and eval_limit(None, "val") == 1.0
    assert eval_shards(70, 5) is not None  # a whole number of batches: every rank gets them
