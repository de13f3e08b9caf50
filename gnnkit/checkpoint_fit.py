"""Whether a checkpoint's weights fit the recipe's model, told before ``fit`` writes anything.

Given to ``fit``, a checkpoint of another architecture, width or feature width failed with torch's
many-line ``Error(s) in loading state_dict`` after the run folder was made. :func:`check_weights_fit`
compares the state dicts as ``load_state_dict`` does and names the first difference and the
settings the checkpoint was trained with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gnnkit.resume import CHECKPOINTS, CONFIG, ResumeError, read_checkpoint


#: Model settings that come from the data (LightningCLI links), named as such in :func:`check_weights_fit`.
FROM_THE_DATA = ("in_channels", "out_channels", "num_nodes", "edge_channels", "full_batch", "molecular")
#: Settings that shape no weights (how the data is read, the task's description, the optimizer), left out of
#: its message.
UNWEIGHTED = ("task", "num_workers", "prefetch", "sampler_device", "data_root", "cache_root", "optimizer",
              "lr_scheduler")


def check_weights_fit(ckpt: str, model: Any, option: str, datamodule: Any = None) -> None:
    """Refuse a checkpoint whose weights the recipe's model cannot load, before ``fit`` writes the run
    folder: another architecture's (a SAGE model's weights into a GCN model), another width, or a
    graph with another feature width. ``fit`` failed on it with torch's multi-line ``Error(s) in
    loading state_dict`` after ``config.yaml`` was written.

    The model's state dict is compared with the checkpoint's as ``load_state_dict`` compares them:
    keys (unless the model sets ``strict_loading = False``) and shapes; a lazily initialised
    parameter has no shape yet, and an entry registered as ``None`` (set in ``setup``, such as a TT
    table's ``order``) is not unexpected.

    Args:
        ckpt: The checkpoint ``fit`` starts from (read by :func:`read_checkpoint`).
        model: The recipe's ``LightningModule``, built.
        option: The option that named the checkpoint, for the message (``--ckpt_path CKPT``).
        datamodule: The recipe's ``LightningDataModule``, whose settings the message compares too.

    Raises:
        ResumeError: Naming a missing or unexpected key or a mismatched shape, the settings the
            checkpoint was trained with that differ from the run's, and where its recipe is.
    """
    checkpoint = read_checkpoint(ckpt)
    problem = _weights_problem(checkpoint["state_dict"], model)
    if problem is None:
        return
    trained = _settings_differ(checkpoint, model, datamodule)
    differ = f"; it was trained with {trained}" if trained else ""
    config = Path(ckpt).resolve().parent.parent / CONFIG
    where = f" ({config})" if Path(ckpt).resolve().parent.name == CHECKPOINTS and config.is_file() else ""
    advice = (f"give the recipe and options it was trained with{where}, or start without --ckpt_path"
              if option.startswith("--ckpt_path") else "the model is built differently from the one that wrote it "
              "(a gnnkit upgrade?): start a new run")
    raise ResumeError(f"gnnkit run {option}: the checkpoint's weights do not fit the recipe's model ({problem})"
                      f"{differ}; {advice}")


def _weights_problem(saved: dict[str, Any], model: Any) -> str | None:
    """The first disagreement of ``saved`` (a checkpoint's ``state_dict``) with ``model``'s
    (``None`` when it loads): a missing key, an unexpected key, or a shape; with how many more."""
    from torch.nn.parameter import is_lazy

    own = model.state_dict()
    strict = getattr(model, "strict_loading", True) is not False
    missing = [key for key in own if key not in saved] if strict else []
    unexpected = [key for key in saved if key not in own and not _registered(model, key)] if strict else []
    resized = [key for key in own if key in saved and not is_lazy(own[key])
               and tuple(own[key].shape) != tuple(getattr(saved[key], "shape", ()))]
    problems = ([f"the model's {k} is missing from the checkpoint" for k in missing]
                + [f"the checkpoint's {k} is not in the model" for k in unexpected]
                + [f"{k} is {list(saved[k].shape)} in the checkpoint, {list(own[k].shape)} in the model"
                   for k in resized])
    if not problems:
        return None
    more = f", and {len(problems) - 1} more difference(s)" if len(problems) > 1 else ""
    return problems[0] + more


def _registered(model: Any, key: str) -> bool:
    """Whether ``key`` names a parameter or buffer ``model`` registers but holds ``None`` for (so its
    state dict leaves it out until it is set)."""
    path, _, name = key.rpartition(".")
    try:
        module = model.get_submodule(path)
    except AttributeError:
        return False
    return name in getattr(module, "_parameters", {}) or name in getattr(module, "_buffers", {})


def _settings_differ(checkpoint: dict[str, Any], model: Any, datamodule: Any, most: int = 4) -> str:
    """The first ``most`` settings the checkpoint was trained with that differ from the run's
    (``data.dataset ogbn-arxiv (here synthetic-tiny), model.model sage (here gcn)``), from the
    hyperparameters Lightning saves with it; ``""`` when none differ or none are saved."""
    pairs = [("model", checkpoint.get("hyper_parameters"), dict(getattr(model, "hparams", None) or {})),
             ("data", checkpoint.get("datamodule_hyper_parameters"), dict(getattr(datamodule, "hparams", None) or {}))]
    found = []
    for section, saved, own in pairs:
        for key, value in (saved or {}).items():
            if key.startswith("_") or key in UNWEIGHTED or key not in own or _listed(own[key]) == _listed(value):
                continue
            name = f"the data's {key}" if section == "model" and key in FROM_THE_DATA else f"{section}.{key}"
            found.append(f"{name} {_plain(value)} (here {_plain(own[key])})")
    return ", ".join(found[:most]) + (f" and {len(found) - most} more" if len(found) > most else "")


def _listed(value: Any) -> Any:
    """``value`` with its tuples as lists, as a checkpoint's saved settings hold them."""
    if isinstance(value, dict):
        return {key: _listed(item) for key, item in value.items()}
    return [_listed(item) for item in value] if isinstance(value, (list, tuple)) else value


def _plain(value: Any) -> str:
    """A setting as a recipe writes it: ``true``/``false``/``null`` for Python's bools and ``None``."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)
