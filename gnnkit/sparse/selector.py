"""The learned SpMM format selector and where its model comes from.

Following Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph Neural
Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352>, a model trained offline on measured
timings maps cheap matrix features (:mod:`gnnkit.sparse.features`) to a storage format. gnnkit's
model is cost-sensitive: a multi-output tree ensemble predicts, for every format, the log of its
time relative to the fastest one (forward or backward product, conversion amortised), and the
selector takes the smallest prediction among the formats that can hold the matrix (equal
predictions: the first in :data:`~gnnkit.sparse.formats.FORMATS`). Whether ``auto`` then times
the pick on the matrix is :mod:`gnnkit.sparse.decision`'s call.

Which format is fastest depends on the hardware, so the selector keeps one model per device kind
(:data:`DEVICE_KINDS`: ``cpu``, ``cuda``), and a matrix is judged by the model of the device it
lives on. Model files are JSON (:meth:`Selector.save` / :meth:`Selector.load`), never pickle, and
name the device kind they were measured on. For a device kind, the model in use is, in order: the
one set with :func:`set_selector`; the file named by ``$GNNKIT_SELECTOR`` (``$GNNKIT_SELECTOR_CUDA``
for CUDA); the user's calibrated model (``gnnkit formats calibrate --device KIND``,
:func:`calibrated_path`); the model shipped with the package (:data:`SHIPPED_MODELS`). A kind with
none of them has no model: :func:`gnnkit.sparse.decision.decide` then times the candidates on the
matrix where that can pay, and keeps :data:`NO_MODEL_DEFAULT` otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.features import (FEATURE_NAMES, feature_vector, matrix_features, threads_feature,
                                    transposed_features)
from gnnkit.sparse.forest import TreeEnsemble
from gnnkit.sparse.formats import FORMATS
from pipeline.errors import DatasetError

MODEL_KIND = "gnnkit-spmm-selector"
MODEL_VERSION = 1
#: Device kinds the selector keeps a model for (``torch.device.type``).
DEVICE_KINDS = ("cpu", "cuda")
#: The models shipped with the package, per device kind (a kind whose file is absent ships none).
SHIPPED_MODELS = {"cpu": Path(__file__).with_name("selector_model.json"),
                  "cuda": Path(__file__).with_name("selector_model_cuda.json")}
SHIPPED_MODEL = SHIPPED_MODELS["cpu"]
#: Environment variable naming a model file, per device kind.
MODEL_ENV = {"cpu": "GNNKIT_SELECTOR", "cuda": "GNNKIT_SELECTOR_CUDA"}
#: What ``auto`` keeps on a device kind without a model: torch's CSR (MKL on CPU, cuSPARSE on CUDA).
NO_MODEL_DEFAULT = "csr"


def device_kind(device: torch.device | str) -> str:
    """The device kind whose model judges matrices on ``device`` (``"cuda:1"`` -> ``"cuda"``).

    Raises:
        ValueError: No SpMM format runs on that kind of device.
    """
    kind = torch.device(device).type
    if kind not in DEVICE_KINDS:
        raise ValueError(f"format selector: no SpMM formats for device kind '{kind}' (kinds: {', '.join(DEVICE_KINDS)})")
    return kind


class Selector:
    """Picks the fastest SpMM format for a matrix and a feature width.

    Args:
        ensemble: Tree ensemble from :data:`~gnnkit.sparse.features.FEATURE_NAMES` vectors to
            one predicted log relative cost per name of ``formats``.
        formats: Format names, in the ensemble's output order.
        meta: Provenance (corpus size, machine, threads, accuracy on held-out data, ...).
        default: The format kept unless another is predicted clearly faster.
        margin: How much lower (in predicted log cost) another format must be to replace
            ``default``; chosen by cross-validation when training, it guards against noisy labels.
        device: The device kind the model's timings were measured on (:data:`DEVICE_KINDS`).
    """

    def __init__(self, ensemble: TreeEnsemble, formats: list[str], meta: dict[str, Any] | None = None,
                 default: str = "csr", margin: float = 0.0, device: str = "cpu") -> None:
        if ensemble.num_features != len(FEATURE_NAMES):
            raise ValueError(f"Selector: model reads {ensemble.num_features} features, gnnkit computes {len(FEATURE_NAMES)}")
        if ensemble.num_outputs != len(formats):
            raise ValueError(f"Selector: model predicts {ensemble.num_outputs} costs for {len(formats)} formats")
        if margin < 0:
            raise ValueError(f"Selector: margin must be >= 0, got {margin}")
        self.ensemble = ensemble
        self.formats = list(formats)
        self.meta = dict(meta or {})
        self.default = default
        self.margin = float(margin)
        self.device = device_kind(device)

    def pick(self, costs: dict[str, float], usable: Any) -> str:
        """The format of least predicted cost among those ``usable(name)`` accepts, keeping
        :attr:`default` unless the best is more than :attr:`margin` cheaper; equal costs resolve in
        the fixed order of :data:`~gnnkit.sparse.formats.FORMATS`."""
        order = {name: i for i, name in enumerate(FORMATS)}
        for name in sorted(costs, key=lambda n: (costs[n], order.get(n, len(order)))):
            if not usable(name):
                continue
            keep_default = (self.default in costs and name != self.default
                            and costs[self.default] - costs[name] <= self.margin and usable(self.default))
            return self.default if keep_default else name
        return "csr"  # CSR holds any matrix

    def predict_costs(self, vector: np.ndarray) -> dict[str, float]:
        """Predicted log relative cost of every known format for one feature vector."""
        costs = self.ensemble.predict(vector)
        return {name: float(c) for name, c in zip(self.formats, costs) if name in FORMATS}

    def costs(self, adj: Adjacency, width: int, transpose: bool = False,
              threads: int | None = None) -> dict[str, float]:
        """Predicted log relative cost of every known format for ``adj`` (or ``adj^T``) at ``width``."""
        feats = matrix_features(adj)
        if transpose:
            feats = transposed_features(feats)
        return self.predict_costs(feature_vector(feats, width, threads_feature(self.device, threads)))

    def rank(self, adj: Adjacency, width: int, transpose: bool = False,
             threads: int | None = None) -> list[tuple[str, float]]:
        """``(format, predicted cost)`` for every format that can hold ``adj``, best first."""
        costs = self.costs(adj, width, transpose, threads)
        ranked = [(n, c) for n, c in costs.items() if usable(FORMATS[n], adj)]
        order = {name: i for i, name in enumerate(FORMATS)}
        return sorted(ranked, key=lambda item: (item[1], order.get(item[0], len(order))))

    def select(self, adj: Adjacency, width: int, transpose: bool = False, threads: int | None = None) -> str:
        """The predicted fastest format of ``adj`` (or of ``adj^T``) for width ``width``.

        Applicability is checked in predicted order, so a format's check (BSR counts its
        blocks) runs only when that format would otherwise be chosen.
        """
        costs = self.costs(adj, width, transpose, threads)
        return self.pick(costs, lambda name: usable(FORMATS[name], adj))

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"kind": MODEL_KIND, "version": MODEL_VERSION, "features": list(FEATURE_NAMES),
                "device": self.device, "formats": self.formats, "default": self.default, "margin": self.margin,
                "meta": self.meta, "trees": self.ensemble.to_json()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Selector:
        if data.get("kind") != MODEL_KIND or data.get("version") != MODEL_VERSION:
            raise ValueError(f"not a gnnkit selector model (kind={data.get('kind')!r}, version={data.get('version')!r})")
        if list(data["features"]) != list(FEATURE_NAMES):
            raise ValueError("selector model was trained on other features than this gnnkit computes; recalibrate")
        ensemble = TreeEnsemble(data["trees"], len(data["features"]), len(data["formats"]))
        return cls(ensemble, data["formats"], data.get("meta"), data.get("default", "csr"),
                   data.get("margin", 0.0), data.get("device", "cpu"))  # models before per-device ones: CPU

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON (atomically: temp file then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Selector:
        """Read a JSON model written by :meth:`save`."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"cannot read selector model {path}: {err}") from err
        selector = cls.from_dict(data)
        selector.meta.setdefault("path", str(path))
        return selector

    def __repr__(self) -> str:
        return (f"Selector(device={self.device}, formats={self.formats}, trees={len(self.ensemble.trees)}, "
                f"default={self.default}, margin={self.margin:g})")


def usable(fmt: Any, adj: Adjacency) -> bool:
    """Whether the selector may pick ``fmt`` for ``adj``: it holds the matrix, needs no
    conversion if the matrix is single-use, runs on the matrix's device, and is selectable here
    (native formats: only when their kernels are built)."""
    # the cheap checks first: applicability may pass over the entries (BSR counts its blocks)
    return ((fmt.conversion_free or not adj.single_use) and fmt.runs_on(adj.device) and fmt.selectable(adj.device)
            and fmt.applicable(adj))


def calibrated_path(kind: str = "cpu") -> Path:
    """Where ``gnnkit formats calibrate --device KIND`` saves this machine's model (under ``$GNNKIT_HOME``)."""
    from pipeline import paths

    kind = device_kind(kind)
    return paths.gnnkit_home() / "sparse" / ("selector.json" if kind == "cpu" else f"selector_{kind}.json")


_override: dict[str, Selector] = {}
_loaded: dict[Path, Selector] = {}


def set_selector(selector: Selector | None, kind: str | None = None) -> None:
    """Use ``selector`` for every ``"auto"`` choice on its device kind from now on.

    Args:
        selector: The model (``None``: back to the files, for ``kind`` or, without it, every kind).
        kind: The device kind it serves (default: the one it was measured on).
    """
    if selector is None:
        if kind is None:
            _override.clear()
        else:
            _override.pop(device_kind(kind), None)
        return
    _override[device_kind(kind or selector.device)] = selector


def model_path(kind: str = "cpu") -> Path | None:
    """The model file the selector loads for a device kind: its environment variable
    (:data:`MODEL_ENV`), else the calibrated one, else the shipped one; ``None`` if it has none."""
    kind = device_kind(kind)
    env = os.environ.get(MODEL_ENV[kind])
    if env:
        return Path(env).expanduser()
    for path in (calibrated_path(kind), SHIPPED_MODELS[kind]):
        if path.is_file():
            return path
    return None


def current_selector(kind: str = "cpu") -> Selector | None:
    """The selector in use for a device kind (each model file loaded once); ``None`` if it has none.

    Raises:
        DatasetError: The environment names a model file that is not there, that cannot be read, or
            that was measured on another device kind (one line naming the variable).
    """
    kind = device_kind(kind)
    if kind in _override:
        return _override[kind]
    path = model_path(kind)
    if path is None:
        return None
    if path not in _loaded:
        if not path.is_file():
            raise DatasetError(MODEL_ENV[kind], f"selector model {path} not found; run 'gnnkit formats calibrate' "
                                                f"or unset {MODEL_ENV[kind]}")
        try:
            _loaded[path] = Selector.load(path)
        except ValueError as err:
            raise DatasetError(MODEL_ENV[kind], f"{err} (expected a model 'gnnkit formats calibrate' wrote)") from None
    selector = _loaded[path]
    if selector.device != kind:
        raise DatasetError(MODEL_ENV[kind], f"selector model {path}: measured on {selector.device}, but it is set "
                                            f"for {kind} matrices; calibrate with 'gnnkit formats calibrate "
                                            f"--device {kind}'")
    return selector


def choose_format(adj: Adjacency, width: int, transpose: bool = False, verify: bool | None = None,
                  shared: bool = False, dtype: torch.dtype = torch.float32) -> str:
    """The format ``auto`` uses for ``adj @ X`` (or ``adj^T @ X``) with ``X`` of width ``width``.

    The model's pick, timed against the runner-up on the matrix only where the model's margin is
    small and the expected saving over the run exceeds the check's cost; see
    :func:`gnnkit.sparse.decision.decide`, whose :class:`~gnnkit.sparse.decision.Decision` this
    returns the choice of (``gnnkit formats explain`` prints the rest).

    Args:
        adj: The matrix.
        width: Feature width.
        transpose: Choose for ``adj^T`` (the backward pass).
        verify: Allow the on-matrix check (default: on unless ``$GNNKIT_SPMM_VERIFY`` is ``0``; off
            gives the model's pick alone, the same on every run).
        shared: The choice serves every single-use matrix of ``adj``'s size class
            (:class:`~gnnkit.models.sparse_conv.BatchPlans`), not ``adj`` alone.
        dtype: Dtype of ``X`` (what a timing multiplies).
    """
    from gnnkit.sparse.decision import decide

    return decide(adj, width, transpose=transpose, verify=verify, shared=shared, dtype=dtype).choice
