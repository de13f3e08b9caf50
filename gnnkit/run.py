"""``gnnkit run RECIPE [--section.key value ...]``: LightningCLI fit, then test with the best checkpoint.

Recipes are LightningCLI configs (``trainer:``, ``model:``, ``data:``), so ``--print_config``,
command-line overrides and the ``config.yaml`` saved in each run folder come for free. Each run
writes ``runs/<recipe>-<time>/`` (or ``--run_dir``) with ``config.yaml``, ``metrics.csv``,
``checkpoints/best.ckpt``, ``checkpoints/last.ckpt`` (every epoch), ``report.json`` and
``curves.png``. ``gnnkit run --resume RUN_DIR`` continues a stopped run in its folder
(:mod:`gnnkit.resume`).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import itertools
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, Union

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeTuple

from gnnkit.accelerator_check import check_accelerator, torch_sees
from gnnkit.allocator import retain_freed_memory
from gnnkit.best_checkpoint import BestCheckpoint
from gnnkit.checkpoint_fit import check_weights_fit
from gnnkit.checkpoint_io import AtomicCheckpointIO
from gnnkit.comm.peer_watch import PeerWatch
from gnnkit.csv_logger import RunCSVLogger
from gnnkit.fault_injection import FaultInjection, fault_from_env
from gnnkit.hints import add_reference_argument, homophily_hint, size_hint
from gnnkit.host_memory_guard import HostMemoryGuard
from gnnkit.last_checkpoint import LastCheckpoint
from gnnkit.optim import GaLoreAdamW  # noqa: F401  (a known Optimizer subclass: `--optimizer GaLoreAdamW`)
from gnnkit.optim.foreign_state import ForeignOptimizerState
from gnnkit.partitioned.rank_data import check_rank_count
from gnnkit.quiet import quietly, resuming, unvalidated
from gnnkit.report import EpochTimer, write_report
from gnnkit.resume import (CHECKPOINTS, LAST, RUN_DIR_ENV, ResumeError, RunPlan, check_same_graph, claimed_run_dir,
                           plan_command, prepare_metrics, say_what_the_folder_holds, wants_help)
from gnnkit.run_command import USAGE
from gnnkit.run_lock import run_folder_lock
from gnnkit.saved_config import AtomicSaveConfig
from gnnkit.set_aside import SetAside
from gnnkit.setting_checks import SettingRefused
from gnnkit.tasks import (DEFAULT_TASK, SHARED_LINKS, TaskFamily, add_task_argument, override_values, recipe_task,
                          task_family)
from pipeline import log, setup_logging
from pipeline.homophily import is_heterophilous
from pipeline.paths import nearest_existing
from pipeline.progress import draws_bars

#: What ``gnnkit run --help`` says about gnnkit's own options (LightningCLI's follow).
RUN_HELP = """\
gnnkit run RECIPE [--run_dir DIR] [--ckpt_path CKPT] [LightningCLI arguments]
gnnkit run --resume RUN_DIR [--ckpt_path CKPT] [LightningCLI arguments]

Train and test a recipe; the run folder (--run_dir, default runs/<recipe>-<time>) gets config.yaml,
metrics.csv, checkpoints/best.ckpt and checkpoints/last.ckpt (written every epoch), report.json and
curves.png.

  --run_dir DIR      the run folder
  --resume RUN_DIR   continue a stopped (or killed) run in its folder, with its config.yaml and from
                     checkpoints/last.ckpt; metrics.csv is continued, report.json and curves.png cover
                     every epoch. Trainer overrides apply (e.g. a larger --trainer.max_epochs);
                     model, data and optimizer ones are refused (the checkpoint holds them).
  --ckpt_path CKPT   the checkpoint Lightning's fit starts from (a file, or last / best of the run
                     folder); with --resume it replaces last.ckpt
Under torchrun --max-restarts N a restarted job resumes from last.ckpt by itself (give --run_dir, or
--rdzv-id, so every restart finds the same folder; set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for
torchrun, pytorch/pytorch#135712).
"""


class _HelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's help, with :data:`RUN_HELP`'s lines kept as written."""


#: jsonargparse's refusal of a value of the wrong type, one type or a union of several.
_WRONG_TYPE = re.compile(r'Parser key "(?P<key>[^"]+)": (Expected a (?P<type><class [^>]+>)\. Got value: |'
                         r'Does not validate against any of the Union subtypes Subtypes: \[(?P<types>[^\]]*)\].*'
                         r'Given value: )(?P<value>.*)$')


#: jsonargparse's refusal of a class given without an argument it requires (``--lr_scheduler StepLR``).
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '(?P<cls>[^']+)': (?P<problem>.+?)"
                            r"(?: - |\s*Given value type|$)")


def _plain_type_error(text: str) -> str:
    """``trainer.max_epochs: expected int or None, got 'abc'`` for jsonargparse's wrong-type refusal
    (``Parser key "trainer.max_epochs": Does not validate against any of the Union subtypes ...``),
    with a ``Literal``'s values listed (``trainer.precision: expected one of 64, 32, 16, 16-mixed, ...``)
    and a class given without an argument it requires named with that argument
    (``lr_scheduler: torch.optim.lr_scheduler.StepLR needs step_size (--lr_scheduler.step_size VALUE)``);
    any other text as it is."""
    wrong = _WRONG_TYPE.match(text)
    if wrong is None:
        return text
    key = wrong["key"]
    problem = _CLASS_PROBLEM.search(text)
    if problem is not None:
        required = re.fullmatch(r"the following arguments are required: (.+)", problem["problem"].strip())
        if required is not None:
            names = [name.strip() for name in required[1].split(",")]
            flags = ", ".join(f"--{key}.{name} VALUE" for name in names)
            return f"{key}: {problem['cls']} needs {' and '.join(names)} ({flags})"
        detail = problem["problem"].strip()
        if detail.startswith('Parser key "'):  # an argument of the class, of the wrong type
            plain = _plain_type_error(detail.replace('Parser key "', f'Parser key "{key}.', 1))
            if not plain.startswith("Parser key"):
                return plain
        return f"{key}: {problem['cls']}: {detail}"
    types = text.split(" Errors:")[0] if wrong["types"] is not None else wrong["type"]  # Literal[...] holds "]"
    names = ["None" if name == "NoneType" else name for name in re.findall(r"<class '([\w.]+)'>", types)]
    values = list(dict.fromkeys(value.strip().strip("'\"") for literal in re.findall(r"Literal\[([^\]]*)\]", types)
                                for value in literal.split(",")))
    wanted = " or ".join([f"one of {', '.join(values)}"] * bool(values) + names)
    return f"{key}: expected {wanted}, got {wrong['value']!r}"


class _OneLineErrors(LightningArgumentParser):
    """LightningCLI's parser, whose refusal of a setting (an unknown key, a value of the wrong type)
    is one line, as gnnkit's own errors are, instead of the whole usage (some 80 lines) ahead of it."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):  # raising, or its debug output
            super().error(message, ex)
        text = _plain_type_error(" ".join(line.strip() for line in str(message).splitlines() if line.strip()))
        sys.stderr.write(f"gnnkit: error: {text}{self._did_you_mean(text)} (gnnkit run RECIPE --help lists the "
                         f"settings)\n")
        self.exit(2)

    def _did_you_mean(self, text: str) -> str:
        """``; did you mean --trainer.max_epochs?`` for a misspelt option of an "unrecognized
        arguments" refusal (the closest known option, if one is close)."""
        if not text.startswith("unrecognized arguments:"):
            return ""
        known = [option for action in self._actions for option in action.option_strings if option.startswith("--")]
        for word in text.split(":", 1)[1].split():
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.8)
            if word.startswith("--") and close:
                return f"; did you mean {close[0]}?"
        return ""


class GnnkitCLI(LightningCLI):
    """LightningCLI wired for gnnkit: the task family's module and datamodule, the datamodule's
    shapes and task flowing into the model, and a run folder with a CSV log, the best checkpoint (by
    validation metric) and the saved config."""

    def __init__(self, run_dir: Path, args: list[str], resumed: bool = False,
                 family: TaskFamily | None = None, recipe_defaults: str | None = None) -> None:
        self.run_dir = run_dir
        self.family = family or task_family(DEFAULT_TASK)
        self.timer = EpochTimer(log_lines=not draws_bars())
        fault = None if resumed else fault_from_env()
        module, datamodule = self.family.classes()
        super().__init__(
            module,
            datamodule,
            args=args,
            run=False,
            seed_everything_default=0,
            save_config_callback=AtomicSaveConfig,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"prog": "gnnkit run", "description": RUN_HELP, "formatter_class": _HelpFormatter,
                           "allow_abbrev": False,  # --trainer.max_epoch 3 set max_epochs: a typo passed silently
                           "usage": USAGE,  # not the 85 generated lines of every setting ahead of gnnkit's options
                           # --help of a recipe shows its values as the defaults
                           **({"default_config_files": [recipe_defaults]} if recipe_defaults else {})},
            parser_class=_OneLineErrors,
            trainer_defaults={
                "default_root_dir": str(run_dir),
                "enable_progress_bar": draws_bars(),
                "enable_model_summary": False,
                "callbacks": [
                    BestCheckpoint(dirpath=run_dir / CHECKPOINTS, filename="best",
                                   monitor="val_metric", mode="max", save_top_k=1, resumed=resumed),
                    LastCheckpoint(run_dir / CHECKPOINTS),
                    self.timer,
                    PeerWatch(),
                    HostMemoryGuard(),
                    *([FaultInjection(fault)] if fault is not None else []),
                ],
            },
        )

    def before_instantiate_classes(self) -> None:
        """Check the model's settings before the datamodule is built: it reads the dataset, and
        preprocesses it on first use (minutes for products), so a bad model setting came after that."""
        module, _ = self.family.classes()
        settings = self._get(self.config, "model", default=None)
        module.check_settings(settings.as_dict() if settings is not None else {})
        trainer = self._get(self.config, "trainer", default=None)
        check_accelerator(trainer.get("accelerator") if trainer is not None else None)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        counts_before_fractions(parser)
        add_reference_argument(parser)
        add_task_argument(parser)
        for source, target in (*SHARED_LINKS, *self.family.links):
            parser.link_arguments(source, target, apply_on="instantiate")
        # `optimizer:` / `lr_scheduler:` (class_path, init_args) reach the model, which builds them over
        # its parameter groups; left out, the model's Adam and `lr_schedule` run as before.
        parser.add_optimizer_args((torch.optim.Optimizer,), link_to="model.optimizer")
        parser.add_lr_scheduler_args(LRSchedulerTypeTuple, link_to="model.lr_scheduler")

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        """Link ``optimizer:`` / ``lr_scheduler:`` to the model's arguments of those names as plain
        ``{"class_path", "init_args"}`` dicts (or ``None``), which the checkpoint's hparams can hold."""
        for key, (_, link_to) in {**parser._optimizers, **parser._lr_schedulers}.items():
            if link_to != "AUTOMATIC":
                parser.link_arguments(key, link_to, compute_fn=_plain_spec)

    def instantiate_trainer(self, **kwargs: Any):
        """The configured trainer, plus the run's CSV log and atomic checkpoint writes; under
        ``--trainer.enable_checkpointing false`` without gnnkit's checkpoints (Lightning refuses a
        ``ModelCheckpoint`` then, and ``last.ckpt`` is not written)."""
        trainer_config = self._get(self.config_init, "trainer", default={})
        if trainer_config.get("enable_checkpointing") is False:
            callbacks = [c for c in self.trainer_defaults["callbacks"] if not isinstance(c, ModelCheckpoint)]
            for callback in callbacks:
                if isinstance(callback, LastCheckpoint):
                    callback.save = False
            self.trainer_defaults["callbacks"] = callbacks
        logger: Any = RunCSVLogger(self.run_dir)
        configured = trainer_config.get("logger")
        if configured not in (None, True, False):
            logger = [logger, *(configured if isinstance(configured, list) else [configured])]
        plugins = trainer_config.get("plugins") or []
        plugins = [*(plugins if isinstance(plugins, list) else [plugins]), AtomicCheckpointIO()]
        trainer = super().instantiate_trainer(logger=logger, plugins=plugins, **kwargs)
        refuse_process_started_ranks(trainer, trainer_config.get("strategy"))
        return trainer


def refuse_process_started_ranks(trainer: pl.Trainer, configured: Any) -> None:
    """Refuse a strategy that starts its ranks with ``multiprocessing`` (``ddp_spawn``, ``ddp_fork``,
    ``ddp_notebook``, ``start_method`` ``spawn``/``fork``/``forkserver``): what those ranks measure
    (epoch times, the best checkpoint's metric, hence the report) stays in them, and a spawned rank
    has neither gnnkit's log lines nor its filters. ``ddp`` trains the same, each rank a copy of the
    command (Lightning's launcher), as under ``torchrun``.

    Raises:
        ValueError: one line naming the strategy and what to use instead.
    """
    launcher = getattr(trainer.strategy, "launcher", None)
    if not isinstance(launcher, _MultiProcessingLauncher):
        return
    method = getattr(launcher, "_start_method", "spawn")
    name = configured if isinstance(configured, str) else f"{type(trainer.strategy).__name__}(start_method={method!r})"
    raise ValueError(f"trainer.strategy: {name} starts its ranks with multiprocessing ({method!r}), and their epoch "
                     "times and validation metric (the report) never reach this process; use --trainer.strategy ddp "
                     "(the same training, each rank a copy of the command) or torchrun")


#: Trainer arguments whose int is a number of batches and whose float a fraction of them.
BATCH_COUNTS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")


def counts_before_fractions(parser: LightningArgumentParser) -> None:
    """Parse ``--trainer.limit_val_batches 1`` (and the other :data:`BATCH_COUNTS`) as the int 1, one
    batch, as Lightning documents, not as 1.0, all of them (its footgun, Lightning-AI/pytorch-lightning#11950).

    Lightning annotates them ``Union[int, float]``, but typing hands back a cached union that is equal
    as a set and lists ``float`` first (``Optional[Union[float, int]]`` made elsewhere), and jsonargparse
    tries a union's members in order and widens an int to a float: ``1`` became ``1.0`` (100% of the
    batches) and ``20`` became ``20.0``, in the run and in its ``config.yaml``. A written float
    (``0.5``, ``1.0``) stays a float.
    """
    for key in BATCH_COUNTS:
        action = parser._option_string_actions.get(f"--trainer.{key}")
        members = getattr(getattr(action, "_typehint", None), "__args__", ())
        if int in members and float in members:
            action._typehint = Union[(int, *(m for m in members if m is not int))]


def _plain_spec(spec: Any) -> dict[str, Any] | None:
    """A parsed ``class_path``/``init_args`` Namespace as a plain YAML dict (``None`` stays ``None``;
    tuples such as Adam's ``betas`` become lists, which the model's untyped dict field dumps as they are)."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        return [plain(item) for item in value] if isinstance(value, (list, tuple)) else value

    return plain(spec.as_dict() if hasattr(spec, "as_dict") else spec)


def _cli(run_dir: Path, args: list[str], resumed: bool = False, task: str = DEFAULT_TASK,
         recipe_defaults: str | None = None) -> GnnkitCLI:
    """Parse ``args`` with LightningCLI for ``task``'s classes (it exits on ``--print_config`` and
    ``--help``), with ``recipe_defaults``'s values as the defaults when given."""
    argv, sys.argv = sys.argv, sys.argv[:1]  # LightningCLI reads `args`, not gnnkit's own argv
    try:
        return GnnkitCLI(run_dir, args, resumed=resumed, family=task_family(task), recipe_defaults=recipe_defaults)
    finally:
        sys.argv = argv


@quietly
def run(recipe: str, overrides: list[str], plan: RunPlan | None = None) -> dict[str, Any]:
    """Train and test one recipe; returns the report (also written to the run folder).

    Lightning's hardware lines, its litlogger tip and torch's ``LeafSpec`` deprecation warning are
    filtered while it runs (:mod:`gnnkit.quiet`), not afterwards.

    Args:
        recipe: Path of a recipe YAML.
        overrides: LightningCLI arguments (``--trainer.max_epochs 5``), plus gnnkit's ``--run_dir PATH``,
            ``--resume RUN_DIR`` and ``--ckpt_path CKPT`` (see :data:`RUN_HELP`). With ``--resume``,
            ``recipe`` is that flag (the ``gnnkit run`` parser passes every argument through).
        plan: What :func:`~gnnkit.resume.plan_command` made of them already, if anything.
    """
    setup_logging()
    retain_freed_memory()
    plan = plan or plan_command(recipe, overrides)
    if plan is None:
        _cli(Path("."), ["--help"])  # gnnkit's options, then LightningCLI's; exits
        return {}
    try:
        task = recipe_task(plan.config, plan.overrides)
        task_family(task)
    except ValueError as err:  # reported like gnnkit's other run arguments: one line, exit 2
        raise ResumeError(str(err)) from None
    if wants_help(plan.overrides):  # the recipe's settings, its values shown as the defaults; exits
        _cli(Path("."), ["--help"], task=task, recipe_defaults=plan.config)
        return {}
    new_parents = _new_folders(plan.run_dir.parent)  # what making the run folder makes, if it is new
    new_folder = plan.claim or not plan.run_dir.exists()
    with contextlib.ExitStack() as held:
        if not new_folder:  # a folder another run may be using: refused before the data is read (minutes)
            held.enter_context(run_folder_lock(plan.run_dir))
        cli, run_dir = _parsed(plan, task)
        say_what_the_folder_holds(plan)
        run_dir.mkdir(parents=True, exist_ok=True)  # only now: a run that only parses writes nothing
        if new_folder:  # no other run can be using a folder this one just made, until now
            held.enter_context(run_folder_lock(run_dir))  # before: a run refused for another's lock removes nothing
        made = [run_dir, *new_parents] if new_folder else []
        with (_environment(RUN_DIR_ENV, str(run_dir)),  # the ranks Lightning starts use this folder too
              _undone_if_refused(run_dir, made) as aside):
            return _train_and_test(plan, cli, task, aside)


def _parsed(plan: RunPlan, task: str) -> tuple[GnnkitCLI, Path]:
    """The run's LightningCLI (model, data and trainer built) and its folder, the checks that need
    them passed.

    Raises:
        ResumeError: A setting the classes refused, another graph or weights that do not fit the
            checkpoint, or partitions for another rank count: one line.
    """
    with claimed_run_dir(plan) as run_dir:  # a new folder of its own, removed again if parsing fails
        try:
            cli = _cli(run_dir, ["--config", plan.config, *plan.overrides], resumed=plan.resumed, task=task)
            if getattr(cli.datamodule, "partitions", None) is not None:  # else every rank's traceback, later
                check_rank_count(cli.datamodule.partitions, cli.trainer.world_size)
            if plan.resumed and plan.ckpt_path is not None:
                check_same_graph(run_dir, plan.ckpt_path, type(cli.datamodule).__qualname__, cli.datamodule.entry.key)
            if plan.ckpt_path is not None:  # else torch's many-line `Error(s) in loading state_dict`, inside fit
                check_weights_fit(plan.ckpt_path, cli.model, _ckpt_option(plan), cli.datamodule)
        except ResumeError:  # gnnkit's own line, as it is
            raise
        except (ValueError, MisconfigurationException) as err:  # a setting the classes refused: one line
            raise ResumeError(_refused(err)) from err
    return cli, run_dir


def _ckpt_option(plan: RunPlan) -> str:
    """The option that named the run's checkpoint, for its messages: ``--ckpt_path CKPT``, or
    ``--resume RUN_DIR`` for the folder's own ``last.ckpt``."""
    if plan.resumed and Path(plan.ckpt_path or "") == plan.run_dir / CHECKPOINTS / LAST:
        return f"--resume {plan.run_dir}"
    return f"--ckpt_path {plan.ckpt_path}"


def _new_folders(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, innermost first: what ``mkdir(parents=True)``
    of it makes."""
    found = nearest_existing(path)
    return list(itertools.takewhile(lambda folder: folder != found, (path, *path.parents)))


@contextlib.contextmanager
def _undone_if_refused(run_dir: Path, made: list[Path]) -> Iterator[SetAside]:
    """Undo what the run did to the disk if the block refuses it (:class:`ResumeError`: raised in
    ``fit`` before training starts, such as another optimizer's state in the checkpoint): remove the
    folders it made (``made``: the run folder, then the parents made for it), so that a refused run
    leaves no folder holding only its ``config.yaml``; in a folder that was there before the run
    (``--resume``, a given ``--run_dir``), put back the files it set aside (:class:`SetAside`: the
    earlier run's metrics, checkpoints and config). A parent another run has put a folder in since
    is kept."""
    aside = SetAside(run_dir)
    try:
        yield aside
    except ResumeError:
        if made:
            shutil.rmtree(made[0], ignore_errors=True)
            for parent in made[1:]:
                with contextlib.suppress(OSError):  # not empty: another run's folder is there too
                    parent.rmdir()
        elif restored := aside.restore():
            log.info("run refused: %s has its earlier %s back", run_dir, ", ".join(restored))
        raise
    except BaseException as err:  # a signal, an error: the CLI's line names the folder to continue
        err.gnnkit_run_dir = str(run_dir)  # type: ignore[attr-defined]
        raise
    finally:
        aside.drop()


def _refused(err: Exception) -> str:
    """The line for a setting that the model, the data module or Lightning's ``Trainer`` refused when
    built (gnnkit's checks name the field; a refusal of Lightning's that speaks of a GPU is told what
    this torch sees; an accelerator it cannot use here is refused earlier, :func:`check_accelerator`)."""
    message = " ".join(str(err).split())
    listing = "Available names are:" in message  # Lightning's refusal of a name, which lists cuda
    if re.search(r"gpu|cuda", message, re.IGNORECASE) and not listing and not torch.cuda.is_available():
        message += f" ({torch_sees()}, sees no GPU)"
    return message


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block, the former value (or none) after: a second
    :func:`run` in the same process must not take the first one's folder."""
    former = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if former is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = former


#: The task families whose runs get size hints: their recipes' reference graphs are one graph of N nodes.
HINTED_TASKS = (DEFAULT_TASK, "link")


def _hints(recipe: Path, cli: GnnkitCLI, model: str, facts: dict[str, Any], task: str, brought: bool) -> list[str]:
    """A node or link run's hints: the graph far smaller or larger than the recipe's reference, or
    (nodes) heterophilous unlike it, or, for a graph the user ``brought`` (``--data.dataset``), too
    few training labels to tell (:mod:`gnnkit.hints`; the recipe's own graph, Cora's 140 labels,
    would be told every run)."""
    reference, homophily = cli.config_init.get("reference"), facts.get("adjusted_homophily")
    edges = facts.get("homophily_edges") if brought else None
    hints = (size_hint(recipe, reference, model, facts["name"], facts["num_nodes"], is_heterophilous(homophily),
                       task=task),
             homophily_hint(recipe, reference, facts["name"], homophily, edges))
    return [hint for hint in hints if hint]


def _train_and_test(plan: RunPlan, cli: GnnkitCLI, task: str, aside: SetAside) -> dict[str, Any]:
    """Fit and test the parsed run in ``plan.run_dir`` (the earlier run's files it replaces go to
    ``aside`` first); the report."""
    run_dir = plan.run_dir
    prepare_metrics(plan, aside)
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    trainer.callbacks.append(_DropAtTrainStart(aside))
    ranks = f", {trainer.world_size} ranks ({trainer.strategy.__class__.__name__})" if trainer.world_size > 1 else ""
    facts = data.describe()
    log.info("run %s: %s on %s (%s), %d parameters%s", run_dir, getattr(model, "gnn", type(model).__name__),
             facts["name"], facts["loader"], model.num_params, ranks)
    if plan.ckpt_path is not None:  # log lines come from rank 0 alone (pipeline.progress)
        log.info("resume: %s continues from %s", run_dir, plan.ckpt_path)
    hinted = not plan.resumed and task in HINTED_TASKS
    brought = "data.dataset" in override_values(plan.overrides)
    for hint in (_hints(Path(plan.config), cli, model.gnn.model, facts, task, brought) if hinted else []):
        log.info(hint)
    validating = trainer.limit_val_batches != 0
    if not trainer.checkpoint_callback:
        log.info("checkpointing off (enable_checkpointing false): no checkpoints, so the run cannot be resumed; "
                 "the test takes the last weights")
    elif not validating:
        log.info("validation off (limit_val_batches 0): no best checkpoint, the test takes the last weights")
    with (resuming() if plan.ckpt_path is not None else contextlib.nullcontext(),
          contextlib.nullcontext() if validating else unvalidated()):
        try:
            with _sigterm_outlasting_workers(trainer):
                trainer.fit(model, datamodule=data, ckpt_path=plan.ckpt_path)
        except ForeignOptimizerState as err:  # one line, as a refused resume request
            raise ResumeError(f"{plan.ckpt_path}: {err}") from None
        except SettingRefused as err:  # a setting the data or the ranks rule out, found in setup: one line
            raise ResumeError(str(err)) from None
    ckpt = "best" if trainer.checkpoint_callback and trainer.checkpoint_callback.best_model_path else None
    with _sigterm_outlasting_workers(trainer):
        results = trainer.test(model, datamodule=data, ckpt_path=ckpt, verbose=False)
    test = results[0]["test_metric"]
    report = write_report(run_dir, trainer=trainer, model=model, datamodule=data, test=test, timer=cli.timer)
    if trainer.is_global_zero:
        print(f"test {report['metric']}: {test:.4f} (val {report['val']:.4f})" if report["val"] is not None
              else f"test {report['metric']}: {test:.4f}")
        print(run_dir)
    _release_process_group()
    return report


@contextlib.contextmanager
def _sigterm_outlasting_workers(trainer: pl.Trainer) -> Iterator[None]:
    """Make an error after a SIGTERM the stop it is: a ``timeout``, ``docker stop`` or a scheduler
    signals the whole process group, the loader's workers die of it, and torch raised
    "DataLoader worker (pid N) is killed by signal: Terminated" before Lightning's own
    ``SIGTERMException`` (a traceback and status 1; the CLI says one line for the latter)."""
    try:
        yield
    except RuntimeError as err:
        if trainer.received_sigterm:
            raise SIGTERMException from err
        raise


class _DropAtTrainStart(pl.Callback):
    """Delete the earlier run's files set aside once training starts: ``fit`` can no longer refuse
    the run then, and a run killed later leaves no copy of them in its folder."""

    def __init__(self, aside: SetAside) -> None:
        self.aside = aside

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.aside.drop()


def _release_process_group() -> None:
    """Destroy the ranks' process group once training and testing are done: a gloo group still
    alive at interpreter exit can abort the process (``terminate called without an active
    exception``) after a successful run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
