"""``GnnkitStrategy``: DDP with gnnkit's gradient communication, as a Lightning strategy."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from typing import Any, Callable, Literal, Optional, Union

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.optim import Optimizer
from typing_extensions import override

from gnnkit import quiet, setting_checks
from gnnkit.comm.allreduce import AllReduce
from gnnkit.comm.base import Communicator
from gnnkit.comm import failures, mode_options
from gnnkit.comm.dear import DeAR
from gnnkit.comm.fusion import CommHook, FusionTuner
from gnnkit.comm.multistream import MultiStreamAllReduce
from gnnkit.comm.powersgd import PowerSGD
from gnnkit.comm.registry import MODES, resolve_mode
from gnnkit.device_clock import device_clock
from gnnkit.rank_state import fitting
from gnnkit.registration import make_strategy
from gnnkit.comm.signsgd import SignSGD
from gnnkit.comm.topk_a2a import GATHERS, TopKA2A
from gnnkit.comm.topk_allgather import TopKAllGather

#: Checkpoint key of the communication state (one entry per rank).
CHECKPOINT_KEY = "gnnkit_comm"
#: DDP bucket size while ``bucket_mb="auto"`` tunes the fusion of buckets on top of it.
AUTO_BASE_BUCKET_MB = 1.0


class GnnkitStrategy(DDPStrategy):
    """Data-parallel training (a ``DDPStrategy``) whose gradient averaging is one of gnnkit's modes.

    Works with any LightningModule, on CPU (gloo) and GPU (NCCL) alike: unlike Lightning's stock
    strategy, which registers comm hooks only on CUDA, it always registers its own hook. Registered
    by name at ``import gnnkit``: ``Trainer(strategy="gnnkit")`` (dense all-reduce) and one alias
    per mode, ``"gnnkit_multistream"``, ``"gnnkit_topk_a2a"``, ...

    Every mode's state (residuals, PowerSGD matrices, tuned fusion size, step counts) is saved in
    Lightning checkpoints, per rank, and restored on resume.

    Args:
        comm: ``"allreduce"`` (as stock DDP), ``"multistream"``, ``"topk_a2a"``,
            ``"topk_allgather"``, ``"signsgd"``, ``"powersgd"`` or ``"dear"``.
        streams: Collectives ``multistream`` keeps in flight at once (see :class:`MultiStreamAllReduce`).
        density: Fraction of gradient elements sent by ``topk_a2a`` / ``topk_allgather``.
        gather: ``topk_a2a``'s all-gather phase: ``"auto"``, ``"dense"`` or ``"sparse"``.
        warmup_steps: Steps of dense all-reduce before a lossy mode takes over.
        sign_error_feedback: ``signsgd`` with error feedback (Karimireddy et al., ICML 2019).
        sign_momentum: ``signsgd``'s worker momentum (Signum; 0: plain signSGD).
        powersgd_rank: Rank of PowerSGD's approximation.
        bucket_mb: DDP bucket (fusion) size in MiB, or ``"auto"``: binary search over measured step
            time in the first steps, then fixed.
        tune_steps: Timed steps per candidate fusion size when ``bucket_mb="auto"``.
        find_unused_parameters: Passed to ``DistributedDataParallel``.
        fixed_buckets: Keep DDP's first grouping of parameters into buckets for the whole run (DDP
            otherwise regroups them by gradient arrival after its first step). Default: on for the
            modes whose result depends on the grouping (``topk_a2a``, ``topk_allgather``), so a
            resumed run takes the uninterrupted run's steps. Done through
            ``find_unused_parameters=True``, DDP's one switch that skips the regrouping (an extra
            walk over the autograd graph per step).
        static_graph: Passed to ``DistributedDataParallel``.
        process_group_backend: ``"gloo"``/``"nccl"`` (default: by device).
        timeout: Collective timeout in seconds (or a ``timedelta``); default ``$GNNKIT_COMM_TIMEOUT``,
            else 60 s. Passed to ``init_process_group`` and gnnkit's own group: a rank that dies or
            hangs makes the others fail within it, with an error naming the lost rank (see
            :mod:`gnnkit.comm.failures`). Recipes: ``--trainer.strategy.init_args.timeout 120``.
        start_method: How Lightning starts the ranks (``"popen"``, ``"spawn"``, ...).
        accelerator: Set by the Trainer.
        parallel_devices: Set by the Trainer.
        cluster_environment: Set by the Trainer.
        checkpoint_io: Set by the Trainer.
        precision_plugin: Set by the Trainer.
    """

    strategy_name = "gnnkit"

    def __init__(
        self,
        comm: str = "allreduce",
        streams: int = 2,
        density: float = 0.01,
        gather: str = "auto",
        warmup_steps: int = 0,
        sign_error_feedback: bool = False,
        sign_momentum: float = 0.0,
        powersgd_rank: int = 1,
        bucket_mb: Union[float, Literal["auto"]] = 25.0,
        tune_steps: int = 3,
        find_unused_parameters: bool = False,
        fixed_buckets: Optional[bool] = None,
        static_graph: bool = False,
        process_group_backend: Optional[str] = None,
        timeout: Optional[Union[float, timedelta]] = None,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        accelerator: Optional[pl.accelerators.Accelerator] = None,
        parallel_devices: Optional[list[torch.device]] = None,
        cluster_environment: Optional[ClusterEnvironment] = None,
        checkpoint_io: Optional[CheckpointIO] = None,
        precision_plugin: Optional[Precision] = None,
    ) -> None:
        self.comm = resolve_mode(comm)
        if gather not in GATHERS:
            raise ValueError(f"gather must be one of {list(GATHERS)}, got {gather!r}")
        mode_options.check_numbers(density, sign_momentum, bucket_mb)
        mode_options.check_switches(sign_error_feedback=sign_error_feedback, fixed_buckets=fixed_buckets,
                                    find_unused_parameters=find_unused_parameters, static_graph=static_graph)
        for name, value, low in (("streams", streams, 1), ("powersgd_rank", powersgd_rank, 1),
                                 ("warmup_steps", warmup_steps, 0), ("tune_steps", tune_steps, 1)):
            setting_checks.at_least(name, value, low, f"an integer >= {low}")  # 2.5 failed inside fit
        given = {"streams": streams, "density": density, "gather": gather, "sign_error_feedback": sign_error_feedback,
                 "sign_momentum": sign_momentum, "powersgd_rank": powersgd_rank}
        if unused := mode_options.unused_options(self.comm, given, _DEFAULTS):
            rank_zero_warn(f"GnnkitStrategy(comm={self.comm!r}) does not use {'; '.join(unused)}")
        self.streams, self.density, self.gather = streams, density, gather
        self.warmup_steps, self.powersgd_rank = warmup_steps, powersgd_rank
        self.sign_error_feedback, self.sign_momentum = sign_error_feedback, sign_momentum
        self.bucket_mb, self.tune_steps = bucket_mb, tune_steps
        timeout = failures.resolve_timeout(timeout)
        self.communicator = self._make_communicator()  # validates the mode's options
        self.fixed_buckets = self.communicator.bucket_dependent if fixed_buckets is None else fixed_buckets
        # DDP's C++ notice that the switch found no unused parameter is printed at the first forward:
        # hidden when the switch is gnnkit's doing (fixed_buckets), not the user's
        self._hush_unused_notice = self.fixed_buckets and not find_unused_parameters
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=find_unused_parameters or self.fixed_buckets,
            static_graph=static_graph,
            bucket_cap_mb=AUTO_BASE_BUCKET_MB if bucket_mb == "auto" else float(bucket_mb),
        )
        self.hook: Optional[CommHook] = None
        self.tuner: Optional[FusionTuner] = None
        self._restored: Optional[dict[str, Any]] = None
        # dear's deferred step: optimizer, model, kwargs, the param groups' settings, the closure's output
        self._pending_step: Optional[tuple[Optimizer, Any, dict[str, Any], list[dict[str, Any]], Any]] = None
        self.peers: list[failures.Peer] = []

    def _make_communicator(self) -> Communicator:
        """The one place a mode name becomes a communicator with its options."""
        factories: dict[str, Callable[[], Communicator]] = {
            "allreduce": AllReduce,
            "multistream": lambda: MultiStreamAllReduce(streams=self.streams),
            "topk_a2a": lambda: TopKA2A(density=self.density, gather=self.gather),
            "topk_allgather": lambda: TopKAllGather(density=self.density),
            "signsgd": lambda: SignSGD(error_feedback=self.sign_error_feedback, momentum=self.sign_momentum),
            "powersgd": lambda: PowerSGD(rank=self.powersgd_rank),
            "dear": DeAR,
        }
        assert set(factories) == set(MODES), "every registered mode needs a factory here"
        return factories[self.comm]()

    # -- registration ---------------------------------------------------------------------------
    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"gnnkit"`` and ``"gnnkit_<mode>"`` for every mode, replacing the lazy
        factory :func:`gnnkit.registration.make_strategy` put there by ``import gnnkit``."""
        entries = [("gnnkit", "allreduce")] + [(f"gnnkit_{m}", m) for m in sorted(MODES)]
        for name, mode in entries:
            held = dict.get(strategy_registry, name)  # the registry's own get() builds a strategy
            if held is not None and held["strategy"] is not make_strategy:
                continue  # re-import (e.g. importlib reload): the entry is already ours
            strategy_registry.register(name, cls, description=f"gnnkit strategy, comm={mode!r}",
                                       override=True, comm=mode)

    # -- setup: the hook on every backend -------------------------------------------------------
    @property
    def timeout(self) -> timedelta:
        """The collective timeout every process group of this strategy uses."""
        return self._timeout

    @override
    def setup_distributed(self) -> None:
        super().setup_distributed()
        store = failures.default_store()
        if self.world_size > 1 and store is not None:  # where each rank runs, so a failure can name the one lost
            self.peers = failures.publish_peers(store, self.global_rank, self.world_size, self._timeout)

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        if self.comm == "dear":
            if trainer.accumulate_grad_batches > 1:
                raise ValueError("GnnkitStrategy(comm='dear') defers each optimizer step and cannot "
                                 "accumulate gradients: set accumulate_grad_batches=1")
            if trainer.lightning_module is not None and not trainer.lightning_module.automatic_optimization:
                raise ValueError("GnnkitStrategy(comm='dear') needs automatic optimization")
        super().setup(trainer)

    @override
    def _register_ddp_hooks(self) -> None:
        """Register gnnkit's comm hook on any device (Lightning's own does so only on CUDA)."""
        assert isinstance(self.model, torch.nn.parallel.DistributedDataParallel)
        if self.comm != "allreduce" and (sparse := mode_options.sparse_gradient_layers(self.model.module)):
            raise ValueError(f"GnnkitStrategy(comm={self.comm!r}): layers {sparse} give sparse gradients, which "
                             "only comm='allreduce' reduces (or build them with sparse=False)")
        backend = dist.get_backend()
        group = dist.new_group(backend=backend, timeout=self._timeout)  # never interleaves with Lightning's
        self.communicator.setup(group)
        fusion = 0.0
        if self.bucket_mb == "auto":
            total = sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)
            self.tuner = FusionTuner(total / 2**20, steps=self.tune_steps, agree=self._agree_max)
            fusion = self.tuner.current_mb
        self.hook = CommHook(self.communicator, self.model.module, warmup_steps=self.warmup_steps,
                             fusion_mb=fusion)
        self.hook.setup(group)
        self._apply_restored()
        self.model.register_comm_hook(state=None, hook=self.hook.__call__)
        rank_zero_info(f"gnnkit comm: {self.communicator!r} on {backend}, {self.world_size} ranks, "
                       f"warm-up {self.warmup_steps} dense steps, bucket_mb={self.bucket_mb}")

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        if not self._hush_unused_notice:
            return super().training_step(*args, **kwargs)
        # the notice comes once a process, at the first forward that syncs gradients (not one
        # inside no_sync, as Lightning accumulates)
        self._hush_unused_notice = not getattr(self.model, "require_backward_grad_sync", True)
        with quiet.native_stderr_without(quiet.UNUSED_PARAMETERS_NOTICE):
            return super().training_step(*args, **kwargs)

    def _agree_max(self, seconds: float) -> float:
        value = torch.tensor([seconds], dtype=torch.float64)
        if self.root_device.type == "cuda":
            value = value.to(self.root_device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.communicator.group)
        return float(value.item())

    # -- stepping -------------------------------------------------------------------------------
    @override
    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any],
                       model: Optional[Union[pl.LightningModule, torch.nn.Module]] = None,
                       **kwargs: Any) -> Any:
        tuning = self.tuner is not None and self.hook is not None and not self.tuner.done
        start = device_clock(self.root_device) if tuning else 0.0
        if self.comm == "dear" and self.hook is not None:
            self.flush()  # the previous step's update, before this step's forward
            output = closure()
            snapshot = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
            self._pending_step = (optimizer, model, kwargs, snapshot, output)
        else:
            output = super().optimizer_step(optimizer, closure, model, **kwargs)
        if tuning:
            self.tuner.record(device_clock(self.root_device) - start)
            self.hook.fusion_mb = self.tuner.current_mb
            if self.tuner.done:
                rank_zero_info(f"gnnkit comm: fusion size tuned to {self.tuner.result:g} MiB "
                               f"(step times {self.tuner.times})")
        return output

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        super().post_backward(closure_loss)
        if isinstance(self.communicator, DeAR) and self.communicator.pending:
            self.communicator.finish_backward()

    def flush(self) -> None:
        """Apply a deferred ``dear`` update now (no-op for the other modes).

        The precision plugin gets the deferred closure's output: a plugin with a gradient scaler
        (``16-mixed``) takes ``None`` for a skipped backward and would skip the step.
        """
        if self._pending_step is None:
            return
        optimizer, model, kwargs, snapshot, output = self._pending_step
        self._pending_step = None
        assert isinstance(self.communicator, DeAR) and self.lightning_module is not None
        self.communicator.apply(self.lightning_module)
        current = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        for group, settings in zip(optimizer.param_groups, snapshot):
            group.update(settings)
        try:
            self.precision_plugin.optimizer_step(optimizer, model=model or self.lightning_module,
                                                 closure=lambda: output, **kwargs)
        finally:
            for group, settings in zip(optimizer.param_groups, current):
                group.update(settings)

    @override
    def on_validation_start(self) -> None:
        self.flush()
        super().on_validation_start()

    @override
    def on_train_end(self) -> None:
        self.flush()
        super().on_train_end()
        if self.hook is not None:
            dense, steps = self.hook.dense_steps, self.communicator.steps
            warm_up = f"{dense} dense warm-up, then " if dense else ""
            rank_zero_info(f"gnnkit comm: {steps + dense} steps: {warm_up}{steps} with {self.comm}")

    # -- checkpoints ----------------------------------------------------------------------------
    def comm_state_dict(self) -> dict[str, Any]:
        """This rank's communication state."""
        state: dict[str, Any] = {"mode": self.comm}
        if self.hook is not None:
            state["hook"] = self.hook.state_dict()
        else:
            state["hook"] = {"communicator": self.communicator.state_dict()}
        if self.tuner is not None:
            state["fusion_tuned"] = self.tuner.done
        return state

    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        self.flush()  # a checkpoint holds the weights after every step it counts
        return super().lightning_module_state_dict()

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: _PATH,
                        storage_options: Optional[Any] = None) -> None:
        """Add every rank's communication state (gathered to rank 0), then save as DDP does."""
        state = self.comm_state_dict()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, state)
        else:
            states = [state]
        checkpoint[CHECKPOINT_KEY] = {"mode": self.comm, "options": repr(self.communicator), "world_size": len(states),
                                      "ranks": states}
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    @override
    def load_checkpoint(self, checkpoint_path: _PATH, weights_only: Optional[bool] = None) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        # kept for the hook of the coming fit (Lightning restores DDP checkpoints before setup);
        # validate/test/predict runs never communicate gradients and leave the state alone
        trainer = getattr(self.lightning_module, "_trainer", None)
        self._restored = checkpoint.get(CHECKPOINT_KEY) if fitting(trainer) else None
        return checkpoint

    def _apply_restored(self) -> None:
        saved, self._restored = self._restored, None
        if saved is None or self.hook is None:
            return
        if saved["mode"] != self.comm:
            rank_zero_warn(f"gnnkit comm: checkpoint was trained with comm={saved['mode']!r}, now "
                           f"{self.comm!r}: communication state starts fresh")
            return
        if saved["world_size"] != self.world_size:
            rank_zero_warn(f"gnnkit comm: checkpoint has state of {saved['world_size']} ranks, now "
                           f"{self.world_size}: communication state starts fresh")
            return
        if saved.get("options", repr(self.communicator)) != repr(self.communicator):  # the mode's own state still fits
            rank_zero_warn(f"gnnkit comm: checkpoint was trained with {saved['options']}, now {self.communicator!r}: "
                           "its state (residuals, momentum) carries over where both use it")
        state = saved["ranks"][self.global_rank]
        self.hook.load_state_dict(state["hook"])
        if self.tuner is not None and state.get("fusion_tuned"):
            self.tuner.result = self.hook.fusion_mb

    # -- reporting and errors -------------------------------------------------------------------
    def report_info(self) -> dict[str, Any]:
        """What ran, for ``report.json``."""
        info: dict[str, Any] = {**self.communicator.info(), "world_size": self.world_size,
                                "warmup_steps": self.warmup_steps, "bucket_mb": self.bucket_mb}
        if self.hook is not None:
            info["dense_steps"] = self.hook.dense_steps
            info["fusion_mb"] = self.hook.fusion_mb
        if self.tuner is not None:
            info["fusion_tuning_s"] = {str(self.tuner.candidates[i]): round(t, 5) for i, t in self.tuner.times.items()}
        if dist.is_available() and dist.is_initialized():
            info["backend"] = dist.get_backend()
        return {"comm": info}

    @override
    def on_exception(self, exception: BaseException) -> None:
        """Rewrite a failed collective's error into one line naming the lost rank(s), and DDP's error
        for parameters the loss did not use into what to set on this strategy (Lightning's advice,
        ``strategy='ddp_find_unused_parameters_true'``, trains with plain DDP instead)."""
        ddp = next((arg for arg in exception.args if isinstance(arg, str) and UNUSED_PARAMETERS.match(arg)), None)
        if ddp is not None:  # DDP's own text follows: it names the parameters without a gradient
            exception.args = (f"the LightningModule has parameters that were not used in producing the loss "
                              f"training_step returned; if that is intended, GnnkitStrategy(comm={self.comm!r}, "
                              "find_unused_parameters=True) finds them each step (Lightning's "
                              "strategy='ddp_find_unused_parameters_true' would average with plain DDP, without "
                              f"gnnkit's communication). DDP said: {ddp}",)
        else:  # DDPStrategy's rewrite would put Lightning's advice in place of DDP's text
            super().on_exception(exception)
        failures.name_lost_ranks(exception, self.peers, self.global_rank, self.world_size, self._timeout)

    def __repr__(self) -> str:
        return (f"GnnkitStrategy(comm={self.comm!r}, streams={self.streams}, density={self.density}, "
                f"gather={self.gather!r}, warmup_steps={self.warmup_steps}, "
                f"sign_error_feedback={self.sign_error_feedback}, sign_momentum={self.sign_momentum}, "
                f"powersgd_rank={self.powersgd_rank}, bucket_mb={self.bucket_mb!r}, "
                f"tune_steps={self.tune_steps})")


#: DDP's error when a parameter got no gradient in the step before (``find_unused_parameters`` off).
UNUSED_PARAMETERS = re.compile(r".*Expected to have finished reduction in the prior iteration", re.DOTALL)

#: The constructor's defaults, to tell an option a user set from one left alone.
_DEFAULTS = {name: p.default for name, p in inspect.signature(GnnkitStrategy.__init__).parameters.items()}

GnnkitStrategy.register_strategies(StrategyRegistry)
