"""``gnnkit formats list|explain|calibrate``: inspect and retrain the SpMM format selector."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import torch

from gnnkit.arg_types import in_range
from gnnkit.sparse.adjacency import Adjacency


def _device(name: str) -> torch.device:
    """``--device``'s value, refused by argparse in one line when this machine cannot use it."""
    from gnnkit.sparse.selector import DEVICE_KINDS

    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in DEVICE_KINDS:
        raise argparse.ArgumentTypeError(f"'{name}' is not a device gnnkit's formats run on (cpu, cuda, cuda:N)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"'{name}': CUDA is not available here (torch {torch.__version__}, "
                                         f"{torch.cuda.device_count()} GPUs visible)")
    return device


def _model_line(kind: str) -> str:
    """Which model speaks for a device kind, and where it comes from."""
    from gnnkit.sparse.selector import current_selector

    selector = current_selector(kind)
    if selector is None:
        return (f"{kind}: no model ('gnnkit formats calibrate --device {kind}' makes one; until then auto "
                "times the usable formats on matrices that serve many products, else uses csr)")
    meta = selector.meta
    source = meta.get("path") or "set in code"
    where = ", ".join(meta.get("device_names", [])) or meta.get("machine", "?")
    return (f"{kind}: {source}  ({meta.get('matrices', '?')} matrices, {meta.get('samples', '?')} samples, "
            f"trained {meta.get('trained', '?')} on {where})")


def _load_adjacency(dataset: str) -> tuple[str, Adjacency]:
    """The canonical CSR of a registry dataset or OGB-format folder (preprocessed if needed)."""
    from pipeline import preprocess, resolve

    spec = resolve(dataset)
    graph = preprocess(spec, spec.preprocess).open()
    return graph.meta.get("name", dataset), Adjacency(graph.indptr, graph.indices)


def _list(args: argparse.Namespace) -> int:
    from gnnkit.sparse.formats import FORMATS
    from gnnkit.sparse.selector import DEVICE_KINDS

    for name, fmt in FORMATS.items():
        doc = (type(fmt).__doc__ or "").strip().splitlines()[0]
        print(f"  {name:15s} {doc}  [{', '.join(fmt.devices)}]")
    print("\nselector models, one per device kind:")
    for kind in DEVICE_KINDS:
        print(f"  {_model_line(kind)}")
    return 0


def _print_decision(decision: Any) -> None:
    """The lines of ``formats explain`` saying what ``auto`` uses and why."""
    from gnnkit.sparse.decision import VERIFY_WITHIN

    print(f"  why: {decision.reason}")
    print(f"  model: the {decision.device} model ({decision.model or 'none for ' + decision.device})")
    if decision.runner_up is not None:
        print(f"  model's pick {decision.pick}, runner-up {decision.runner_up}, margin {decision.margin:.3f} "
              f"(x{math.exp(decision.margin):.2f}; the check needs <= x{VERIFY_WITHIN:g})")
    if decision.runner_up is not None:
        print(f"  expected saving {decision.expected_saving_s:.3g} s over {decision.products} products "
              f"vs check cost {decision.check_cost_s:.3g} s -> {'checked' if decision.checked else 'not checked'}")
    if decision.timings_s:
        print("  timed (s per product, conversion amortised over the run): "
              + ", ".join(f"{n} {t:.4g}" for n, t in decision.timings_s.items()))


def _explain(args: argparse.Namespace) -> int:
    from gnnkit.sparse.decision import RunLength, current_run_length, decide
    from gnnkit.sparse.features import describe, matrix_features, transposed_features
    from gnnkit.sparse.measure import AMORTIZE_STEPS, best_format, measure_formats
    from gnnkit.sparse.selector import device_kind

    device = args.device
    name, adj = _load_adjacency(args.dataset)
    adj = adj.to(device)
    assumed = current_run_length()
    calls = args.calls_per_epoch or (2 if args.epochs else assumed.calls_per_epoch)  # a given one counts alone too
    run = RunLength(args.epochs or assumed.epochs, calls)
    print(f"{name}: {adj} on {device}\nmodel: {_model_line(device_kind(device))}\n"
          f"run: {run.epochs} epochs x {run.calls_per_epoch} "
          f"products per epoch = {run.products} products per pass and width\n\nfeatures (A, forward pass):")
    print(describe(matrix_features(adj)))
    for label, transpose in (("forward  A @ X", False), ("backward A^T @ dY", True)):
        matrix = adj.t() if transpose else adj
        decision = decide(adj, args.width, transpose=transpose, run=run)  # what auto does, not a copy of it
        print(f"\n{label} (width {args.width}): auto uses {decision.choice}"
              f" ({'checked on the matrix' if decision.checked else 'not timed'})")
        _print_decision(decision)
        if transpose:
            feats = transposed_features(matrix_features(adj))
            print(f"  (A^T: {feats['n_rows']:.0f} rows, row nnz max {feats['row_max']:.0f}, cv {feats['row_cv']:.3g})")
        timings = {} if args.no_measure else measure_formats(matrix, args.width, repeats=args.repeats)
        best = best_format(timings, run.products) if timings else None
        print(f"  {'format':15s} {'predicted':>10s} {'spmm ms':>10s} {'convert ms':>11s} {'cost ms':>10s}")
        for fmt in decision.scores or timings or decision.timings_s:  # no model: no predictions
            t = timings.get(fmt)
            predicted = f"{decision.scores[fmt]:10.3f}" if fmt in decision.scores else f"{'-':>10s}"
            cells = ([f"{t.spmm_s * 1e3:10.3f}", f"{t.convert_s * 1e3:11.2f}", f"{t.cost(run.products) * 1e3:10.3f}"]
                     if t else [f"{'-':>10s}", f"{'-':>11s}", f"{'-':>10s}"])
            marks = (" <- auto" if fmt == decision.choice else "") + (" <- fastest" if fmt == best else "")
            print(f"  {fmt:15s} {predicted} {' '.join(cells)}{marks}")
    if not args.no_measure:
        print(f"\ncost = spmm + convert / {run.products} (conversion amortised over the run's products); predicted = "
              f"the model's log(cost / best cost), which it learnt with conversion over {AMORTIZE_STEPS} products")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from gnnkit.sparse.calibrate import label_corpus, train_and_save
    from gnnkit.sparse.corpus import sample_specs
    from gnnkit.sparse.selector import MODEL_ENV, calibrated_path, device_kind

    device, kind = args.device, device_kind(args.device)
    out = Path(args.out) if args.out else calibrated_path(kind)
    labels = Path(args.labels) if args.labels else out.with_name(
        "calibration_labels.jsonl" if kind == "cpu" else f"calibration_labels_{kind}.jsonl")
    if labels.exists() and not args.resume:
        labels.unlink()
    specs = sample_specs(args.count, seed=args.seed, max_rows=args.max_rows, max_nnz=args.max_nnz,
                         large_fraction=args.large_fraction)
    start = time.perf_counter()
    records = label_corpus(
        specs, labels, widths_per_matrix=args.widths_per_matrix, repeats=args.repeats, seed=args.seed,
        progress=lambda i, n, s, sec: print(f"[{i}/{n}] {s.name} {sec:.1f}s", flush=True), device=device,
    )
    selector = train_and_save(records, out, folds=args.folds, meta={"calibrated": True, "corpus": str(labels)})
    quality: dict[str, Any] = {k: round(v, 3) for k, v in selector.meta.items()
                               if k.startswith("cv_") and isinstance(v, float)}
    if out.resolve() == calibrated_path(kind).resolve():
        use = (f"used for {selector.device} matrices from now on; delete it to return to the shipped {kind} model, "
               "or to none where none ships")
    else:  # only the calibrated path is read without being named
        use = f"to use it: export {MODEL_ENV[kind]}={out}"
    print(f"measured {len(records)} samples on {device} in {time.perf_counter() - start:.0f}s; "
          f"held-out quality {quality}\nsaved {out} ({use})")
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``gnnkit formats ...`` to the ``gnnkit`` command."""
    p = subparsers.add_parser("formats", help="SpMM formats: list, explain a dataset, calibrate the selector")
    sub = p.add_subparsers(dest="formats_command", required=True)
    q = sub.add_parser("list", help="the formats and the selector model in use")
    q.set_defaults(func=_list)
    q = sub.add_parser("explain", help="the format auto uses for a dataset and why; features, predicted and measured times")
    q.add_argument("dataset", help="registry name or OGB-format folder path")
    q.add_argument("--width", type=in_range(int, 1), default=128, help="feature width F (default 128)")
    q.add_argument("--repeats", type=in_range(int, 1), default=3, help="timed rounds per format")
    q.add_argument("--no-measure", action="store_true", help="only features, predictions and auto's choice")
    q.add_argument("--device", type=_device, default="cpu",
                   help="where the matrix lives and is timed: cpu or cuda (that device kind's model speaks)")
    q.add_argument("--epochs", type=in_range(int, 1), help="the run's epochs (default: as auto assumes, "
                   "the length set by a fitting model or 100 products)")
    q.add_argument("--calls-per-epoch", type=in_range(int, 1), help="products per epoch and width (default with "
                   "--epochs 2: one training step and one evaluation of a full graph; else as auto assumes)")
    q.set_defaults(func=_explain)
    q = sub.add_parser("calibrate", help="re-measure a small corpus on this machine and retrain the selector "
                       "of one device kind")
    q.add_argument("--device", type=_device, default="cpu", help="device to measure on: cpu or cuda (default cpu)")
    q.add_argument("--count", type=in_range(int, 1), default=60, help="corpus matrices (default 60)")
    q.add_argument("--max-rows", type=in_range(int, 1), default=200_000)
    q.add_argument("--max-nnz", type=in_range(int, 1), default=500_000)
    q.add_argument("--large-fraction", type=in_range(float, 0, 1), default=0.1)
    q.add_argument("--widths-per-matrix", type=in_range(int, 1, 5), default=2)
    q.add_argument("--repeats", type=in_range(int, 1), default=2)
    q.add_argument("--folds", type=in_range(int, 0), default=5, help="cross-validation folds reported (0 = skip)")
    q.add_argument("--seed", type=int, default=1)
    q.add_argument("--out", help="model path (default: the user's cache folder, used automatically)")
    q.add_argument("--labels", help="JSON-lines measurements (default: beside the model)")
    q.add_argument("--resume", action="store_true", help="keep earlier measurements in --labels")
    q.set_defaults(func=_calibrate)
