"""Lightning ``Trainer`` runs with ``GnnkitStrategy`` on 2 CPU ranks (Lightning re-launches this
script for rank 1). ``python lightning_worker.py SCENARIO OUT_DIR``; rank 0 writes
``OUT_DIR/result.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.plugins.precision import MixedPrecision

import gnnkit  # noqa: F401  (registers the strategies by name)
from gnnkit.comm import GnnkitStrategy

OUT = Path(sys.argv[2])


def trainer(strategy, **kwargs) -> pl.Trainer:
    options = dict(accelerator="cpu", devices=2, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(OUT))
    options.update(kwargs)
    return pl.Trainer(strategy=strategy, **options)


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


class Boring(BoringModel):
    """BoringModel with rank-dependent data (so averaging matters) and a step-wise LR schedule."""

    def training_step(self, batch, batch_idx):
        return super().training_step(batch * (1 + self.global_rank) + batch_idx, batch_idx)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.layer.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def fit_boring(strategy, steps: int = 6, **kwargs) -> tuple[list[torch.Tensor], pl.Trainer]:
    pl.seed_everything(0)
    model = Boring()
    t = trainer(strategy, max_steps=steps, limit_val_batches=0, **kwargs)
    t.fit(model)
    return params(model), t


def same(a, b) -> bool:
    return all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a, b))


def scenario_modes() -> dict:
    """Every mode trains BoringModel; allreduce/multistream/dear match stock DDP exactly."""
    out = {}
    ddp, _ = fit_boring("ddp")
    for name in ("gnnkit", "gnnkit_multistream", "gnnkit_dear", "gnnkit_topk_a2a"):
        strategy = name if name != "gnnkit_topk_a2a" else GnnkitStrategy(comm="topk_a2a", density=1.0)
        got, t = fit_boring(strategy)
        out[f"{name}_equals_ddp"] = same(got, ddp)
        out[f"{name}_report"] = t.strategy.report_info()["comm"]["mode"]
    # dear's deferred step under fp16 AMP's gradient scaler, which skips a step whose closure gave
    # None (a scale small enough for these gradients: no step is skipped for overflow)
    def amp() -> list:
        return [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=4.0))]
    pl.seed_everything(0)
    initial = params(Boring())
    ddp16, _ = fit_boring("ddp", plugins=amp())
    dear16, _ = fit_boring("gnnkit_dear", plugins=amp())
    out["gnnkit_dear_16_mixed_equals_ddp"] = same(dear16, ddp16) and not same(ddp16, initial)
    for comm in ("topk_allgather", "signsgd", "powersgd"):
        got, t = fit_boring(GnnkitStrategy(comm=comm, warmup_steps=1, density=0.1))
        out[f"{comm}_finite"] = all(torch.isfinite(p).all().item() for p in got)
        out[f"{comm}_differs"] = not same(got, ddp)
        out[f"{comm}_steps"] = [t.strategy.hook.dense_steps, t.strategy.communicator.steps]
    got, t = fit_boring(GnnkitStrategy(bucket_mb="auto", tune_steps=1), steps=5)
    out["auto_fusion"] = [t.strategy.tuner.done, t.strategy.hook.fusion_mb]
    # gnnkit's own module on the tiny synthetic graph
    from gnnkit.data.datamodule import GraphDataModule
    from gnnkit.module import NodeClassifier
    pl.seed_everything(0)
    data = GraphDataModule("synthetic-tiny")
    model = NodeClassifier(model="sage", hidden_channels=16, num_layers=2, in_channels=data.num_features,
                           out_channels=data.num_classes, task=data.graph.meta, full_batch=True)
    t = trainer(GnnkitStrategy(comm="topk_a2a", density=0.1), max_epochs=2)
    t.fit(model, datamodule=data)
    out["node_classifier_steps"] = t.strategy.communicator.steps
    return out


class Probe(pl.Callback):
    """Records the residuals the strategy starts training with."""

    def on_train_start(self, trainer, pl_module):
        memory = trainer.strategy.communicator.residuals.memory
        torch.save({k: v.clone() for k, v in memory.items()}, OUT / f"start_rank{trainer.global_rank}.pt")


def scenario_resume() -> dict:
    """Checkpoint after 4 steps of topk_a2a, resume to 8: the residuals continue."""
    strategy = GnnkitStrategy(comm="topk_a2a", density=0.1)
    pl.seed_everything(0)
    t = trainer(strategy, max_steps=4, limit_val_batches=0)
    t.fit(Boring())
    ckpt = OUT / "four.ckpt"
    t.save_checkpoint(ckpt)
    mine = {k: v.clone() for k, v in strategy.communicator.residuals.memory.items()}
    torch.save(mine, OUT / f"saved_rank{t.global_rank}.pt")
    pl.seed_everything(0)
    t2 = trainer(GnnkitStrategy(comm="topk_a2a", density=0.1), max_steps=8, limit_val_batches=0,
                 callbacks=[Probe()])
    model = Boring()
    t2.fit(model, ckpt_path=str(ckpt))
    steps = t2.strategy.communicator.steps
    t2.test(model, ckpt_path=str(ckpt), verbose=False)  # testing never touches the comm state
    return {"steps_after_resume": steps, "global_step": t2.global_step,
            "steps_after_test": t2.strategy.communicator.steps}


class Die(Boring):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 2:
            os._exit(3)
        return super().training_step(batch, batch_idx)


def _observe_children_slowly(period_s: int = 60) -> None:
    """Lightning's launcher polls the ranks it started every 5 s and, once one has died, SIGKILLs
    the others: on a loaded machine that can come before the survivor reaches its next collective
    and tells which rank it lost, the message this scenario is about. Here it polls every minute
    (beyond the strategy's 30 s timeout), so the survivor always speaks first."""
    from lightning.fabric.strategies.launchers import subprocess_script

    observer = subprocess_script._ChildProcessObserver
    start = observer.__init__

    def slower(self, main_pid, child_processes, sleep_period=period_s):
        start(self, main_pid, child_processes, sleep_period=period_s)

    observer.__init__ = slower


def scenario_die() -> dict:
    from datetime import timedelta
    _observe_children_slowly()
    pl.seed_everything(0)
    t = trainer(GnnkitStrategy(comm="topk_a2a", density=0.1, timeout=timedelta(seconds=30)),
                max_steps=20, limit_val_batches=0)
    t.fit(Die())
    return {"finished": True}


def scenario_die_plain_ddp() -> dict:
    """Lightning's own DDPStrategy with gnnkit's PeerWatch callback: the lost rank is named too."""
    from datetime import timedelta

    from lightning.pytorch.strategies import DDPStrategy

    from gnnkit.comm import PeerWatch

    _observe_children_slowly()
    pl.seed_everything(0)
    t = trainer(DDPStrategy(timeout=timedelta(seconds=30)), max_steps=20, limit_val_batches=0, callbacks=[PeerWatch()])
    t.fit(Die())
    return {"finished": True}


def scenario_sampled_eval() -> dict:
    """Neighbour-sampled training and test on 2 ranks: each rank evaluates its shard of the test
    split (DistributedSampler); the reported metric must cover the whole split."""
    from gnnkit.data.datamodule import GraphDataModule
    from gnnkit.metrics import evaluate
    from gnnkit.module import NodeClassifier

    pl.seed_everything(0)
    data = GraphDataModule("synthetic-tiny", batch_size=16, num_neighbors=[5, 5], eval_num_neighbors=[-1, -1])
    model = NodeClassifier(model="sage", hidden_channels=16, num_layers=2, in_channels=data.num_features,
                           out_channels=data.num_classes, task=data.graph.meta)
    t = trainer(GnnkitStrategy(comm="allreduce"), max_epochs=2)
    t.fit(model, datamodule=data)
    reported = t.test(model, datamodule=data)[0]["test_metric"]
    # every node's logits from one full-graph forward (all neighbours, as the test loader samples)
    graph = data.graph
    model.eval()
    with torch.no_grad():
        logits = model.gnn(graph.x, graph.edge_index())
    test = graph.split["test"]
    reference = evaluate(model.evaluator, graph.y[test], logits[test])
    values = [None, None]
    torch.distributed.all_gather_object(values, reported)
    return {"reported": values, "reference": reference, "test_nodes": test.numel()}


if __name__ == "__main__":
    result = {"modes": scenario_modes, "resume": scenario_resume, "die": scenario_die,
              "die_plain_ddp": scenario_die_plain_ddp, "sampled_eval": scenario_sampled_eval}[sys.argv[1]]()
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        (OUT / "result.json").write_text(json.dumps(result))
    # An exit with a live gloo group can abort in its threads' teardown ("terminate called
    # without an active exception", exit -6) after the scenario has passed: end it first.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
