"""Label a corpus by measurement and train the format selector on it.

The offline procedure of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph
Neural Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352>: generate matrices
(:mod:`gnnkit.sparse.corpus`), time every format on each (:mod:`gnnkit.sparse.measure`), and fit a
model from features to formats. gnnkit labels the forward product ``A @ X`` and the backward
product ``A^T @ dY`` as separate samples (the two passes choose separately) and fits a
multi-output random forest to the log of each format's cost relative to the best, exported to JSON
(:class:`~gnnkit.sparse.selector.Selector`). ``gnnkit formats calibrate`` runs the same on a smaller
corpus to adapt the model to the user's machine. Labelling runs on one device (the matrices and
their conversions live there) and a model is fitted on the records of one device kind.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from gnnkit.sparse.corpus import MatrixSpec
from gnnkit.sparse.features import feature_vector, matrix_features, threads_feature
from gnnkit.sparse.forest import TreeEnsemble
from gnnkit.sparse.formats import FORMATS
from gnnkit.sparse.measure import AMORTIZE_STEPS, measure_formats
from gnnkit.sparse.selector import Selector, device_kind
from pipeline.atomic import atomic_write_text

#: Log relative cost given to formats that could not hold a matrix (never chosen for it anyway).
MISSING_COST = math.log(100.0)
WIDTHS = (16, 32, 64, 128, 256)


def is_symmetric(adj: Any) -> bool:
    """Whether ``adj`` equals its transpose entry for entry (then one orientation suffices)."""
    t = adj.t()
    return adj.shape == t.shape and torch.equal(adj.indptr, t.indptr) and torch.equal(adj.indices, t.indices)


def label_matrix(
    spec: MatrixSpec,
    widths: Iterable[int],
    repeats: int = 3,
    device: torch.device | str = "cpu",
) -> list[dict[str, Any]]:
    """Measured samples of one corpus matrix: per width, ``A`` and (unless symmetric) ``A^T``.

    Args:
        spec: The corpus matrix.
        widths: Feature widths.
        repeats: Timed products per competitive format.
        device: Where the matrix lives and the formats run.

    Returns:
        Records ``{"matrix", "spec", "orientation", "width", "threads", "device", "loadavg",
        "features", "times"}`` where ``times`` maps format -> :meth:`FormatTiming.as_dict`.
    """
    adj = spec.build().to(device)
    sides = [("A", adj)] if is_symmetric(adj) else [("A", adj), ("AT", adj.t())]
    records = []
    for width in widths:
        for orientation, matrix in sides:
            timings = measure_formats(matrix, int(width), repeats=repeats)
            records.append({
                "matrix": spec.name, "spec": spec.as_dict(), "orientation": orientation,
                "width": int(width), "threads": threads_feature(device_kind(adj.device)),
                "device": device_kind(adj.device),
                "loadavg": round(os.getloadavg()[0], 2),  # how busy the machine was (noise)
                "features": matrix_features(matrix),
                "times": {name: t.as_dict() for name, t in timings.items()},
                **_device_name(adj.device),
            })
    return records


def label_corpus(
    specs: list[MatrixSpec],
    path: Path,
    widths_per_matrix: int = 2,
    repeats: int = 3,
    seed: int = 0,
    progress: Callable[[int, int, MatrixSpec, float], None] | None = None,
    device: torch.device | str = "cpu",
) -> list[dict[str, Any]]:
    """Label ``specs`` into the JSON-lines file ``path``, resuming where a previous run stopped.

    Args:
        specs: Corpus matrices.
        path: JSON-lines output; matrices already in it are skipped.
        widths_per_matrix: Widths drawn (without replacement) from :data:`WIDTHS` per matrix.
        repeats: Timed products per competitive format.
        seed: Seed of the width draw.
        progress: Called as ``progress(done, total, spec, seconds)`` after each matrix.
        device: Where the formats are timed; a file labelled on another device kind is refused.

    Returns:
        All records in ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        _drop_torn_line(path)  # else the next record would be appended to it, and both lost
    earlier = read_records(path) if path.is_file() else []
    if earlier:
        records_device(earlier, expected=device_kind(device), source=path)
    done = {r["matrix"] for r in earlier}
    rng = np.random.default_rng(seed)
    with open(path, "a") as out:
        for i, spec in enumerate(specs):
            widths = rng.choice(WIDTHS, size=widths_per_matrix, replace=False)
            if spec.name in done:
                continue
            start = time.perf_counter()
            records = label_matrix(spec, widths, repeats, device)
            out.write("".join(json.dumps(record) + "\n" for record in records))  # a matrix's widths together
            out.flush()
            if progress is not None:
                progress(i + 1, len(specs), spec, time.perf_counter() - start)
    return read_records(path)


def relabel_formats(
    path: Path,
    formats: list[str],
    repeats: int = 3,
    progress: Callable[[int, int, str, float], None] | None = None,
    device: torch.device | str = "cpu",
) -> list[dict[str, Any]]:
    """Measure ``formats`` again on every matrix of the label file ``path``, keeping the other
    formats' times (after a kernel changed speed, instead of labelling the whole corpus again).

    The file is rewritten atomically at the end; records gain ``relabelled: {format: loadavg}``.

    Args:
        path: JSON-lines labels from :func:`label_corpus`.
        formats: Format names to re-time.
        repeats: Least timed rounds per format.
        progress: Called as ``progress(done, total, matrix name, seconds)`` after each matrix.
        device: Where to time them: the device kind the file was labelled on.

    Returns:
        The updated records.
    """
    records = read_records(path)
    records_device(records, expected=device_kind(device), source=path)
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(record["matrix"], []).append(record)
    for i, (name, group) in enumerate(groups.items()):
        start = time.perf_counter()
        adj = MatrixSpec(**group[0]["spec"]).build().to(device)
        for record in group:
            matrix = adj if record["orientation"] == "A" else adj.t()
            for fmt, timing in measure_formats(matrix, int(record["width"]), formats, repeats=repeats).items():
                record["times"][fmt] = timing.as_dict()
                record.setdefault("relabelled", {})[fmt] = round(os.getloadavg()[0], 2)
        if progress is not None:
            progress(i + 1, len(groups), name, time.perf_counter() - start)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    return records


def _drop_torn_line(path: Path) -> None:
    """Cut a label file back to its last whole line (a run killed while writing leaves part of one)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as handle:
            handle.truncate(end)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines label file (a torn last line from a killed run is ignored)."""
    records = []
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def records_device(records: list[dict[str, Any]], expected: str | None = None, source: Any = "records") -> str:
    """The one device kind ``records`` were measured on (records from before per-device labels: CPU).

    Raises:
        ValueError: They mix device kinds, or their kind is not ``expected``.
    """
    kinds = sorted({str(r.get("device", "cpu")) for r in records})
    if len(kinds) > 1:
        raise ValueError(f"{source}: labels measured on several device kinds {kinds}; one model serves one kind")
    kind = kinds[0] if kinds else (expected or "cpu")
    if expected is not None and kind != expected:
        raise ValueError(f"{source}: labels measured on {kind}, not {expected}; use another labels file")
    return kind


def cost_table(records: list[dict[str, Any]], formats: list[str], amortize: int = AMORTIZE_STEPS) -> np.ndarray:
    """``[samples, formats]`` amortised seconds (``inf`` where a format was not measured)."""
    table = np.full((len(records), len(formats)), np.inf)
    for i, record in enumerate(records):
        for j, name in enumerate(formats):
            t = record["times"].get(name)
            if t is not None:
                table[i, j] = t["spmm_s"] + t["convert_s"] / amortize
    return table


def design_matrix(records: list[dict[str, Any]]) -> np.ndarray:
    """``[samples, len(FEATURE_NAMES)]`` selector inputs of the records."""
    return np.stack([feature_vector(r["features"], r["width"], r["threads"]) for r in records])


def relative_log_costs(costs: np.ndarray) -> np.ndarray:
    """Training targets: ``log(cost / best cost)`` per sample, :data:`MISSING_COST` if unmeasured."""
    rel = np.log(costs / costs.min(axis=1, keepdims=True))
    return np.where(np.isfinite(rel), np.minimum(rel, MISSING_COST), MISSING_COST)


def fit_selector(
    records: list[dict[str, Any]],
    formats: list[str] | None = None,
    n_trees: int = 32,
    max_depth: int = 8,
    min_samples_leaf: int = 4,
    seed: int = 0,
    meta: dict[str, Any] | None = None,
) -> Selector:
    """Fit the cost-predicting forest on labelled records (needs scikit-learn).

    Args:
        records: Output of :func:`label_corpus`.
        formats: Formats the selector may choose (default: every format seen in the records).
        n_trees: Trees in the forest.
        max_depth: Depth limit per tree.
        min_samples_leaf: Smallest leaf.
        seed: Forest seed.
        meta: Extra provenance to store in the model.
    """
    try:
        from sklearn.ensemble import RandomForestRegressor
    except ImportError as err:  # pragma: no cover - scikit-learn comes with ogb
        raise ImportError("training a selector needs scikit-learn (pip install scikit-learn)") from err
    if not records:
        raise ValueError("fit_selector: no labelled records")
    kind = records_device(records)
    if formats is None:
        seen = {name for r in records for name in r["times"]}
        formats = [name for name in FORMATS if name in seen]
    x = design_matrix(records)
    y = relative_log_costs(cost_table(records, formats))
    forest = RandomForestRegressor(n_estimators=n_trees, max_depth=max_depth, min_samples_leaf=min_samples_leaf,
                                   max_features=0.5, random_state=seed, n_jobs=1)
    forest.fit(x, y)
    accelerators = sorted({r["device_name"] for r in records if "device_name" in r})
    info = {
        "trained": time.strftime("%Y-%m-%d %H:%M:%S"),
        "samples": len(records),
        "matrices": len({r["matrix"] for r in records}),
        "threads": sorted({int(r["threads"]) for r in records}),
        "machine": f"{platform.machine()} {platform.processor() or platform.platform()}",
        "torch": torch.__version__,
        "amortize_steps": AMORTIZE_STEPS,
        **({"device_names": accelerators} if accelerators else {}),
        **(meta or {}),
    }
    return Selector(TreeEnsemble.from_sklearn(forest), formats, info, device=kind)


def _device_name(device: torch.device) -> dict[str, str]:
    """``{"device_name": ...}`` of an accelerator, recorded with its labels (nothing for CPU)."""
    return {"device_name": torch.cuda.get_device_name(device)} if device.type == "cuda" else {}


def selection_quality(selector: Selector, records: list[dict[str, Any]]) -> dict[str, float]:
    """How the selector's picks compare with the measured best on ``records``.

    Formats a record has no time for (they could not hold its matrix) are never picked, as in
    :meth:`Selector.select`.

    Returns:
        ``{"selected_over_oracle": geomean of chosen cost / best cost, "accuracy": share of
        exact picks, "csr_over_selected": geomean of CSR cost / chosen cost, "samples": n}``.
    """
    formats = list(selector.formats)
    costs = cost_table(records, formats)
    x = design_matrix(records)
    ratios, csr_ratios, hits = [], [], 0
    for row, vec in zip(costs, x):
        predicted = dict(zip(formats, selector.ensemble.predict(vec)))
        pick = formats.index(selector.pick(predicted, lambda n: np.isfinite(row[formats.index(n)])))
        ratios.append(row[pick] / row.min())
        hits += bool(row[pick] == row.min())
        if "csr" in formats and np.isfinite(row[formats.index("csr")]):
            csr_ratios.append(row[formats.index("csr")] / row[pick])
    return {"selected_over_oracle": _geomean(ratios), "accuracy": hits / max(1, len(records)),
            "csr_over_selected": _geomean(csr_ratios), "samples": len(records)}


def _geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


#: Margins tried by :func:`cross_validate` (log cost: 0 = pure argmin, 0.2 = ~22% predicted gain).
MARGINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)


def cross_validate(records: list[dict[str, Any]], folds: int = 5, seed: int = 0,
                   margins: tuple[float, ...] = MARGINS, **fit_args: Any) -> dict[str, float]:
    """Selection quality on held-out matrices, and the best :attr:`Selector.margin`.

    ``folds``-fold split by matrix (both orientations and all widths of a matrix stay on one
    side); every margin of ``margins`` is scored on the same folds, and the one with the lowest
    pooled selected/oracle ratio is reported with its scores.
    """
    names = sorted({r["matrix"] for r in records})
    rng = np.random.default_rng(seed)
    fold_of = {name: int(f) for name, f in zip(names, rng.permutation(len(names)) % folds)}
    logs: dict[float, list[tuple[float, float, float]]] = {m: [] for m in margins}
    for f in range(folds):
        train = [r for r in records if fold_of[r["matrix"]] != f]
        test = [r for r in records if fold_of[r["matrix"]] == f]
        if not train or not test:
            continue
        selector = fit_selector(train, seed=seed, **fit_args)
        for margin in margins:
            selector.margin = margin
            q = selection_quality(selector, test)
            n = q["samples"]
            logs[margin].append((math.log(q["selected_over_oracle"]) * n, math.log(q["csr_over_selected"]) * n,
                                 q["accuracy"] * n))
    total = len(records)
    scores = {m: tuple(sum(v[i] for v in vals) / max(1, total) for i in range(3)) for m, vals in logs.items()}
    best = min(scores, key=lambda m: scores[m][0])
    return {"cv_selected_over_oracle": math.exp(scores[best][0]), "cv_csr_over_selected": math.exp(scores[best][1]),
            "cv_accuracy": scores[best][2], "cv_folds": folds, "margin": best,
            "cv_by_margin": {str(m): round(math.exp(s[0]), 4) for m, s in scores.items()}}


def fit_time_model(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Absolute time estimates for the selector's check (:class:`~gnnkit.sparse.decision.TimeModel`).

    ``overhead_s``: median fastest product of the smallest 5% of samples (by ``nnz x width``);
    ``s_per_nnz_width``: median of fastest product / (nnz x width) over the larger half (where the
    overhead is small); ``convert_s_per_nnz``: per format, the median conversion seconds per stored entry.
    """
    if not records:
        raise ValueError("fit_time_model: no labelled records")
    work = np.array([max(r["features"]["nnz"], 1.0) * r["width"] for r in records])
    best = np.array([min(t["spmm_s"] for t in r["times"].values()) for r in records])
    small = work <= np.percentile(work, 5)
    overhead = float(np.median(best[small]))
    large = work >= np.median(work)
    slope = float(np.median(best[large] / work[large]))
    rates: dict[str, list[float]] = {}
    for r in records:
        for name, t in r["times"].items():
            rates.setdefault(name, []).append(t["convert_s"] / max(r["features"]["nnz"], 1.0))
    return {"s_per_nnz_width": slope, "overhead_s": overhead,
            "convert_s_per_nnz": {name: float(np.median(v)) for name, v in rates.items()}}


def train_and_save(records: list[dict[str, Any]], out: Path, folds: int = 5, seed: int = 0,
                   meta: dict[str, Any] | None = None) -> Selector:
    """Cross-validate (choosing the margin), fit on every record and save the model JSON to ``out``."""
    quality = cross_validate(records, folds=folds, seed=seed) if folds > 1 else {"margin": 0.0}
    selector = fit_selector(records, seed=seed, meta={**quality, **(meta or {})})
    selector.margin = float(quality["margin"])
    selector.meta["time_model"] = fit_time_model(records)
    selector.meta.update({f"train_{k}": v for k, v in selection_quality(selector, records).items()})
    selector.save(out)
    return selector


__all__ = ["cross_validate", "fit_selector", "fit_time_model", "label_corpus", "label_matrix", "read_records",
           "records_device", "selection_quality", "train_and_save"]
