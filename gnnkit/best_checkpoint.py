"""The run's best checkpoint, which a resumed run keeps tracking after its folder has moved, and a
new run started from another run's checkpoint tracks afresh."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint

#: The state entries that hold paths under the checkpoint folder.
PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def moved(state: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``state`` (a ``ModelCheckpoint``'s) with the paths under the folder ``old`` moved to ``new``."""
    def move(path: Any) -> Any:
        return new + path[len(old):] if isinstance(path, str) and path.startswith(old) else path

    state = {**state, "dirpath": new, **{key: move(state[key]) for key in PATH_KEYS if key in state}}
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {move(path): score for path, score in state["best_k_models"].items()}
    return state


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, which a resumed run (``resumed=True``) restores whole when its
    run folder has moved or been copied since the checkpoint was written: Lightning then reloaded the
    best path alone, not its score, so the next validation counted as best and the test took other
    weights (or a copied folder's test those of the folder it was copied from).

    Args:
        *args: ``ModelCheckpoint``'s.
        resumed: The run continues in its own folder, wherever it now is.
        **kwargs: ``ModelCheckpoint``'s.
    """

    def __init__(self, *args: Any, resumed: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resumed = resumed

    @property
    def state_key(self) -> str:
        """``ModelCheckpoint``'s key, so checkpoints written before this class restore into it."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state, moved to this run's folder for a resumed run; a new run started from
        another run's checkpoint (``--ckpt_path``) keeps its own, empty: Lightning kept the other
        run's best path, with a warning, and the test could take that run's weights."""
        old = state_dict.get("dirpath")
        if isinstance(old, str) and self.dirpath is not None and old != self.dirpath:
            if not self.resumed:
                return
            state_dict = moved(state_dict, old, self.dirpath)
        super().load_state_dict(state_dict)
