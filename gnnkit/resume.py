"""Continuing a run in its own folder: ``gnnkit run --resume RUN_DIR``, ``--ckpt_path``, torchrun restarts.

A run folder holds the resolved ``config.yaml`` and ``checkpoints/last.ckpt`` (written at every
epoch boundary by :class:`~gnnkit.last_checkpoint.LastCheckpoint`). Resuming reuses both: the
config (plus any overrides given, e.g. a larger ``--trainer.max_epochs``) and the checkpoint, passed
to Lightning's ``fit(ckpt_path=...)``. Rows of ``metrics.csv`` for epochs the checkpoint does not
cover are dropped first, so the resumed run appends without duplicates.

Under ``torchrun`` with ``--max-restarts N``, a restarted worker group (``TORCHELASTIC_RESTART_COUNT``
> 0) resumes by itself: the run folder is named after the rendezvous id (``TORCHELASTIC_RUN_ID``,
stable across restarts) unless ``--run_dir`` gives one.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnkit.import_gc import import_without_gc
from gnnkit.set_aside import REWRITTEN_IN_FIT, SetAside
from gnnkit.tasks import override_values
from pipeline import is_rank_zero, log
from pipeline.paths import nearest_existing

#: Environment variable naming the run folder (``gnnkit run`` sets it for the ranks Lightning starts,
#: so they all use the parent's folder).
RUN_DIR_ENV = "GNNKIT_RUN_DIR"
CONFIG = "config.yaml"
METRICS = "metrics.csv"
REPORT = "report.json"  # written by gnnkit.report when a run has finished
CHECKPOINTS = "checkpoints"
LAST = "last.ckpt"  # in CHECKPOINTS, written by gnnkit.last_checkpoint at every epoch boundary


class ResumeError(ValueError):
    """A run that cannot start as asked: a resume request that cannot be honoured, or a setting that
    the run's classes refuse (one line naming the path or field and what was expected; exit 2)."""


@dataclass
class RunArgs:
    """``gnnkit run``'s own options, separated from LightningCLI's.

    Args:
        recipe: Recipe YAML (``None`` with ``--resume``).
        run_dir: ``--run_dir``: the run folder.
        resume: ``--resume``: a run folder to continue.
        ckpt_path: ``--ckpt_path``: the checkpoint ``fit`` starts from.
        overrides: Everything else, for LightningCLI.
    """

    recipe: str | None = None
    run_dir: Path | None = None
    resume: Path | None = None
    ckpt_path: str | None = None
    overrides: list[str] = field(default_factory=list)


OWN_FLAGS = ("--run_dir", "--resume", "--ckpt_path")


def parse_run_args(argv: list[str]) -> RunArgs:
    """Split ``gnnkit run``'s arguments: the recipe (first argument unless it is a flag), gnnkit's
    flags (``--run_dir``, ``--resume``, ``--ckpt_path``, as ``--flag VALUE`` or ``--flag=VALUE``) and
    LightningCLI's overrides."""
    args, rest, it = RunArgs(), [], iter(argv)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name in OWN_FLAGS:
            value = value if eq else next(it, "")
            if not value:
                raise ResumeError(f"gnnkit run {name}: expected a value")
            setattr(args, name[2:], value if name == "--ckpt_path" else Path(value))
        elif args.recipe is None and not rest and not arg.startswith("-"):
            args.recipe = arg
        else:
            rest.append(arg)
    args.overrides = rest
    return args


def elastic_restart() -> int:
    """How often torchrun has restarted this worker group (0 outside torchrun)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0) or 0)


def recipe_name(recipe: str | Path | None) -> str:
    """What a run of ``recipe`` is named after: its file's stem, and for a run folder's
    ``config.yaml`` (a rerun) the recipe that folder is named after (``runs/config-<time>`` before)."""
    path = Path(recipe or "run")
    if path.name == CONFIG and (match := re.fullmatch(r"(.+)-\d{8}-\d{6}(-\d+)?", path.resolve().parent.name)):
        return match.group(1)
    return path.stem


def choose_run_dir(args: RunArgs) -> tuple[Path, bool]:
    """The run folder: ``--resume``, ``--run_dir``, ``$GNNKIT_RUN_DIR``, the torchrun rendezvous id,
    or ``runs/<recipe>-<time>``, in that order; and whether the run claims it
    (:func:`claimed_run_dir`): a name made up here, outside torchrun (whose ranks each make it up
    and share it)."""
    given = _given_run_dir(args)
    if given is not None:
        return given, False
    made_up = Path("runs") / f"{recipe_name(args.recipe)}-{time.strftime('%Y%m%d-%H%M%S')}"
    return made_up, not os.environ.get("TORCHELASTIC_RUN_ID")


def _given_run_dir(args: RunArgs) -> Path | None:
    """The run folder the arguments, the environment or torchrun name, if any."""
    if args.resume is not None:
        if args.run_dir is not None and args.run_dir.resolve() != args.resume.resolve():
            raise ResumeError(f"gnnkit run: --resume {args.resume} and --run_dir {args.run_dir} name different "
                              "folders; a resumed run continues in its own folder")
        return args.resume
    if args.run_dir is not None:
        return args.run_dir
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    stem = recipe_name(args.recipe)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return Path("runs") / f"{stem}-elastic-{run_id}"
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0) or 0) > 0:
        raise ResumeError("gnnkit run under torchrun --max-restarts needs a run folder every restart finds: "
                          "give --run_dir, or an --rdzv-id (or --standalone)")
    return None


@contextlib.contextmanager
def claimed_run_dir(plan: RunPlan) -> Iterator[Path]:
    """The folder of a run being set up (the ``with`` block), made now if its name was made up.

    Such a name (``runs/<recipe>-<time>``) is claimed with an atomic ``mkdir``: if another run took it
    (two runs started in the same second, as a sweep's are), the run takes the first free one of
    ``-2``, ``-3``, ..., so no two runs share a folder. ``plan.run_dir`` becomes the claimed one. If the block
    fails (bad arguments, ``--print_config``'s exit), the claimed folder, and a ``runs/`` made for it,
    are removed again: a run that only parses writes nothing. A given folder is left to the caller.
    """
    if not plan.claim:
        yield plan.run_dir
        return
    made_parent = not plan.run_dir.parent.exists()
    plan.run_dir.parent.mkdir(parents=True, exist_ok=True)
    base = plan.run_dir
    for n in itertools.count(2):
        try:
            plan.run_dir.mkdir()
            break
        except FileExistsError:
            plan.run_dir = base.with_name(f"{base.name}-{n}")
    try:
        yield plan.run_dir
    except BaseException:
        with contextlib.suppress(OSError):
            plan.run_dir.rmdir()
            if made_parent:
                plan.run_dir.parent.rmdir()
        raise


def read_checkpoint(ckpt_path: Path | str) -> dict[str, Any]:
    """A checkpoint's contents (tensors memory-mapped), read once however often the run's checks ask
    (kept for the file as it is: a rewritten one is read again).

    Raises:
        ResumeError: The file is no checkpoint torch can read (cut short, or not one at all).
    """
    try:
        return _loaded(ckpt_path)
    except Exception as err:  # torch raises RuntimeError, pickle's UnpicklingError, EOFError, ...
        raise ResumeError(f"gnnkit run: {ckpt_path}: unreadable checkpoint ({_first_line(err)}); "
                          "give another with --ckpt_path") from None


def _first_line(err: Exception) -> str:
    """The first line of an error's text (at most 200 characters), or its type's name."""
    return (str(err).splitlines() or [type(err).__name__])[0][:200]


def _loaded(ckpt_path: Path | str) -> Any:
    """``torch.load`` of the file with ``weights_only=True`` (cached, see :func:`read_checkpoint`);
    raises what torch raises."""
    stat = os.stat(ckpt_path)
    return _read_checkpoint(str(ckpt_path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _read_checkpoint(ckpt_path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    # here, not at the top: the plan is made before torch and Lightning are imported (and torch
    # without the collector, as gnnkit run imports it: gnnkit.import_gc)
    torch = import_without_gc("torch")
    return torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)


#: What a checkpoint given to ``fit`` is: a ``torch.save`` zip file (Lightning's ``.ckpt``) holding the weights.
CHECKPOINT_FORM = "a Lightning checkpoint, a torch zip file such as a run's checkpoints/last.ckpt"


def check_checkpoint(ckpt_path: str, option: str) -> None:
    """Refuse a file that is no checkpoint ``fit`` can start from before anything is written: not a
    zip file (told without importing torch), one ``torch.load(weights_only=True)`` cannot read, a
    torch file that holds no ``state_dict`` (a bare ``model.state_dict()``, say), or one of the
    weights only (no optimizer state). Left to ``fit``,
    torch's unpickler failed on it with ``IndexError: pop from empty list`` (or another traceback)
    after the run folder was made.

    Args:
        ckpt_path: The checkpoint file.
        option: The option that named it, for the message (``--ckpt_path CKPT``, ``--resume RUN_DIR (CKPT)``).

    Raises:
        ResumeError: Naming the option and what a checkpoint is.
    """
    if not zipfile.is_zipfile(ckpt_path):
        raise ResumeError(f"gnnkit run {option}: not a checkpoint (not a zip file; expected {CHECKPOINT_FORM})")
    try:
        checkpoint = _loaded(ckpt_path)
    except Exception as err:  # a zip of other files, one cut short, a pickle torch refuses to load
        raise ResumeError(f"gnnkit run {option}: not a checkpoint torch can read ({_first_line(err)}; expected "
                          f"{CHECKPOINT_FORM})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ResumeError(f"gnnkit run {option}: a torch file but not a checkpoint (it holds no state_dict; "
                          f"expected {CHECKPOINT_FORM})")
    if "optimizer_states" not in checkpoint:  # Lightning's KeyError in fit, a traceback
        raise ResumeError(f"gnnkit run {option}: the checkpoint holds the weights only (a ModelCheckpoint with "
                          "save_weights_only), and fit continues a training from its optimizer and loop state too; "
                          f"expected {CHECKPOINT_FORM}")


def epochs_done(ckpt_path: Path) -> int:
    """Training epochs a checkpoint has finished (its fit loop's processed epochs).

    Raises:
        ResumeError: The file is no checkpoint torch can read (cut short, or not one at all).
    """
    checkpoint = read_checkpoint(ckpt_path)
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError):
        return int(checkpoint.get("epoch", 0))


def _epoch_of(row: dict[str, str | None]) -> float:
    """The epoch of a ``metrics.csv`` row (``-inf`` for rows without one, ``inf`` for a row cut short
    by a kill, so that it is dropped)."""
    value = row.get("epoch")
    if value == "":
        return float("-inf")
    try:
        return float(value) if value is not None and None not in row.values() else float("inf")
    except ValueError:
        return float("inf")


def trim_metrics(path: Path, epochs: int) -> int:
    """Drop the rows of ``metrics.csv`` logged in epoch ``epochs`` or later (the resumed run logs
    them again); returns how many were dropped."""
    from gnnkit.csv_logger import read_rows, write_rows  # Lightning's: imported only for a resume

    header, rows = read_rows(path)
    if not header:
        return 0
    keep = [r for r in rows if _epoch_of(r) < epochs]
    if len(keep) != len(rows):
        write_rows(path, header, keep)
    return len(rows) - len(keep)


@dataclass
class RunPlan:
    """What ``gnnkit run`` does: which folder, which config, which checkpoint.

    Args:
        run_dir: The run folder.
        config: The config to parse (the recipe, or the folder's ``config.yaml`` when resuming).
        overrides: LightningCLI overrides.
        ckpt_path: Checkpoint for ``fit(ckpt_path=...)`` (``None``: start afresh).
        resumed: Whether the run continues in an existing run folder.
        claim: ``run_dir`` is a name made up from the recipe and the time, outside torchrun, which
            the run claims (:func:`claimed_run_dir`).
    """

    run_dir: Path
    config: str
    overrides: list[str]
    ckpt_path: str | None
    resumed: bool
    claim: bool = False


def _checkpoint(run_dir: Path, ckpt_path: str | None, resumed: bool) -> str | None:
    """The checkpoint ``fit`` starts from: ``--ckpt_path`` (``last``/``best`` name the run folder's
    own), else ``last.ckpt`` when resuming, else none; checked to be one (:func:`check_checkpoint`)."""
    folder = run_dir / CHECKPOINTS
    if ckpt_path in ("last", "best"):
        ckpt_path = str(folder / f"{ckpt_path}.ckpt")
    if ckpt_path is not None:
        if not Path(ckpt_path).is_file():
            raise ResumeError(f"gnnkit run --ckpt_path {ckpt_path}: no such checkpoint file")
        check_checkpoint(ckpt_path, f"--ckpt_path {ckpt_path}")
        return ckpt_path
    if resumed:
        if (folder / LAST).is_file():
            check_checkpoint(str(folder / LAST), f"--resume {run_dir} ({folder / LAST})")
            return str(folder / LAST)
        if (run_dir / REPORT).is_file():
            raise ResumeError(f"gnnkit run --resume {run_dir}: the run finished without checkpoints "
                              f"(trainer.enable_checkpointing false), so there is nothing to continue from")
        log.warning("resume: %s has no checkpoint yet; the run starts from its first epoch", run_dir)
    return None


def say_what_the_folder_holds(plan: RunPlan) -> None:
    """A line when a new run is given a folder that is not empty: an earlier run's (whose results the
    new one replaces), or other files (among which the run's are written). Said once the run's
    settings are taken (a run refused for one left the earlier run as it was, after a line saying
    it would replace it), by rank 0 (the others start after it wrote the folder)."""
    run_dir = plan.run_dir
    if plan.resumed or not is_rank_zero():
        return
    if (run_dir / CONFIG).is_file():
        log.warning("%s holds an earlier run: this one starts afresh there and replaces its checkpoints, metrics, "
                    "report and plots (gnnkit run --resume %s continues it instead)", run_dir, run_dir)
    elif run_dir.is_dir() and any(run_dir.iterdir()):
        log.warning("%s is not empty and holds no run: the run's files are written among what is there", run_dir)


def check_run_dir_path(run_dir: Path) -> None:
    """Refuse a run folder that cannot be one: a file, or a path under a file (``some_file/sub``,
    which ``mkdir`` failed on with ``NotADirectoryError`` once the run was set up).

    Raises:
        ResumeError: Naming the folder and the file in the way.
    """
    found = nearest_existing(run_dir)
    if found is None or found.is_dir():
        return
    if found == run_dir:
        raise ResumeError(f"gnnkit run: the run folder {run_dir} is a file (expected a folder, or a path to make one)")
    raise ResumeError(f"gnnkit run: the run folder {run_dir} is under {found}, which is a file, not a folder "
                      "(expected a folder, or a path to make one)")


def plan_run(args: RunArgs) -> RunPlan:
    """Decide the run folder, config and checkpoint (nothing is written; see :func:`prepare_metrics`).

    Raises:
        ResumeError: ``--resume`` names no run folder, ``--ckpt_path`` no file, or no recipe is
            given for a new run.
    """
    restart = elastic_restart()
    run_dir, claim = choose_run_dir(args)
    check_run_dir_path(run_dir)
    resumed = args.resume is not None or (restart > 0 and (run_dir / CONFIG).is_file())
    if args.resume is not None and not (run_dir / CONFIG).is_file():
        raise ResumeError(f"gnnkit run --resume {run_dir}: no {CONFIG} there (expected a run folder written by "
                          "`gnnkit run`)")
    if not resumed and args.recipe is None:
        raise ResumeError("gnnkit run: expected a recipe (gnnkit run RECIPE [...]) or --resume RUN_DIR")
    if resumed and args.recipe is not None and args.resume is not None:
        raise ResumeError(f"gnnkit run --resume {run_dir}: the run continues with its own {CONFIG}; give "
                          f"overrides only, not a recipe ({args.recipe})")
    config = str(run_dir / CONFIG) if resumed else str(args.recipe)
    overrides = list(args.overrides)
    if resumed:  # the folder may have moved since config.yaml recorded it
        overrides = ["--trainer.default_root_dir", str(run_dir), *overrides]
    ckpt = _checkpoint(run_dir, args.ckpt_path, resumed)
    if args.resume is not None and ckpt is not None:
        _check_resume_overrides(args.overrides, run_dir, Path(ckpt))
    if restart:
        log.info("torchrun restart %d: %s from %s", restart, run_dir, ckpt or "the start")
    return RunPlan(run_dir, config, overrides, ckpt, resumed, claim)


def wants_help(overrides: list[str]) -> bool:
    """Whether ``gnnkit run``'s arguments ask for its help."""
    return any(arg in ("-h", "--help") for arg in overrides)


def plan_command(recipe: str, overrides: list[str]) -> RunPlan | None:
    """The plan of ``gnnkit run RECIPE OVERRIDES...`` (``None`` for a bare ``--help``): made before
    torch and Lightning are imported, so a refused request is one line at once.

    Raises:
        ResumeError: As :func:`plan_run`.
    """
    args = parse_run_args([recipe, *overrides])
    if args.recipe is None and args.resume is None and wants_help(args.overrides):
        return None
    return plan_run(args)


#: The settings the checkpoint's weights, optimizer and samplers were made with, which a resumed run
#: cannot change (how long it trains and how its loaders run, ``trainer.*`` and ``data.num_workers``, it can).
CHECKPOINTED = ("model.", "data.", "optimizer", "lr_scheduler", "seed_everything")


def _check_resume_overrides(overrides: list[str], run_dir: Path, ckpt: Path) -> None:
    """Overrides a resumed run cannot honour, refused in one line before anything is written: a model,
    data or optimizer setting (the checkpoint restores its own optimizer, so ``--model.lr`` changed
    nothing but config.yaml; a new width failed in a size mismatch after config.yaml was rewritten,
    and every later resume failed alike), or fewer epochs than it has trained.

    Raises:
        ResumeError: Naming the overrides, and what to do instead.
    """
    values = override_values(overrides)
    fixed = [key for key in values if key.startswith(CHECKPOINTED) and key != "data.num_workers"]
    if fixed:
        raise ResumeError(f"gnnkit run --resume {run_dir}: {', '.join('--' + k for k in fixed)} would change what its "
                          f"checkpoint holds (weights, optimizer state, samplers); a resumed run continues them, so "
                          f"start a new run for that (gnnkit run {run_dir / CONFIG} --run_dir NEW ...)")
    epochs = values.get("trainer.max_epochs")
    if epochs is not None and epochs.isdigit() and int(epochs) < (done := epochs_done(ckpt)):
        raise ResumeError(f"gnnkit run --resume {run_dir}: it has trained {done} epochs, and --trainer.max_epochs "
                          f"{epochs} is fewer (give at least {done})")


def check_same_graph(run_dir: Path, ckpt: str, state_key: str, graph_key: str) -> None:
    """Refuse to resume on another graph than the checkpoint's: a dataset folder changed since (a
    resumed run trained on silently, its report describing the new graph and its best score the
    old one's).

    Args:
        run_dir: The run folder, for the message.
        ckpt: The checkpoint the run continues from.
        state_key: Where the checkpoint holds the datamodule's state (its class's qualified name).
        graph_key: The cache key of the graph the datamodule opened now.

    Raises:
        ResumeError: The checkpoint's datamodule state names another graph (older checkpoints name
            none and pass).
    """
    state = read_checkpoint(ckpt).get(state_key)
    saved = state.get("graph") if isinstance(state, dict) else None
    if saved is not None and saved != graph_key:
        raise ResumeError(f"gnnkit run --resume {run_dir}: its dataset changed since the checkpoint was written "
                          f"(cache entry {saved[:12]}, now {graph_key[:12]}; or a gnnkit upgrade changed how it is "
                          f"preprocessed), and the checkpoint's weights and "
                          f"samplers belong to the other graph; start a new run for it "
                          f"(gnnkit run {run_dir / CONFIG} --run_dir NEW)")


def prepare_metrics(plan: RunPlan, aside: SetAside) -> None:
    """Make ``metrics.csv`` and ``checkpoints/`` ready for the run (global rank 0 only): the metrics
    trimmed to the checkpoint's epochs when continuing a run in its folder; when a run starts from
    its first epoch in a used folder (afresh, or resumed before its first ``last.ckpt``), the metrics
    removed and so are the earlier run's or attempt's checkpoints (Lightning saved ``best-v1.ckpt``
    beside a stale ``best.ckpt``, which ``--ckpt_path best`` then took), but for one the run starts
    from. What it removes or changes, and the files ``fit`` rewrites before it can refuse the run, go
    to ``aside`` first (put back if ``fit`` refuses the run)."""
    if not is_rank_zero():
        return
    for name in REWRITTEN_IN_FIT:
        aside.copy(plan.run_dir / name)
    metrics = plan.run_dir / METRICS
    if plan.resumed and plan.ckpt_path is not None:
        epochs = epochs_done(Path(plan.ckpt_path))
        aside.copy(metrics)
        dropped = trim_metrics(metrics, epochs)
        if dropped:
            log.info("resume: %s continues after epoch %d; its %d later row(s) (the test's, or those of "
                     "epochs the checkpoint does not hold) are logged anew", metrics, epochs, dropped)
        return
    aside.move(metrics)
    if not (plan.run_dir / CONFIG).is_file():  # checkpoints only of an earlier gnnkit run (or attempt)
        return
    start = Path(plan.ckpt_path).resolve() if plan.ckpt_path is not None else None
    for checkpoint in sorted((plan.run_dir / CHECKPOINTS).glob("*.ckpt")):
        if checkpoint.resolve() != start:
            aside.move(checkpoint)
