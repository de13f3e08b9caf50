"""Rebuild the shipped SpMM format selector: generate the corpus, label it by measurement, train.

The offline step of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph Neural
Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352>, on gnnkit's generated corpus
(:mod:`gnnkit.sparse.corpus`). Labelling appends to a JSON-lines file and resumes where a killed
run stopped; training cross-validates by matrix and writes the model JSON. One model per device
kind: ``--device cuda`` labels on the GPU into ``formats_labels_gpu.jsonl``, and training those labels
writes the shipped CUDA model ``selector_model_cuda.json``.

Examples::

    python bench/formats_corpus.py label --count 300 --labels bench/results/formats_labels.jsonl
    python bench/formats_corpus.py relabel --formats native_csr  # after a kernel changed speed
    python bench/formats_corpus.py train --labels bench/results/formats_labels.jsonl \\
        --out gnnkit/sparse/selector_model.json
    python bench/formats_corpus.py label --device cuda && python bench/formats_corpus.py train --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnkit.sparse.calibrate import (label_corpus, read_records, records_device, relabel_formats,  # noqa: E402
                                     train_and_save)
from gnnkit.sparse.corpus import sample_specs  # noqa: E402
from gnnkit.sparse.selector import SHIPPED_MODELS, device_kind  # noqa: E402

#: The committed labels of each device kind's shipped model.
LABELS = {"cpu": Path("bench/results/formats_labels.jsonl"), "cuda": Path("bench/results/formats_labels_gpu.jsonl")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("label", help="measure every format on the corpus (resumable)")
    p.add_argument("--count", type=int, default=300, help="corpus matrices")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-rows", type=int, default=1_000)
    p.add_argument("--max-rows", type=int, default=1_000_000)
    p.add_argument("--max-nnz", type=int, default=3_000_000)
    p.add_argument("--large-fraction", type=float, default=0.1)
    p.add_argument("--widths-per-matrix", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p = sub.add_parser("relabel", help="time some formats again on the labelled matrices, keep the rest")
    p.add_argument("--formats", nargs="+", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p = sub.add_parser("train", help="fit the selector on the labels and write its JSON")
    p.add_argument("--out", type=Path, help="default: the shipped model of the labels' device kind")
    p.add_argument("--folds", type=int, default=5)
    for p in sub.choices.values():
        p.add_argument("--device", default="cpu", help="device kind to label on / train for: cpu or cuda")
        p.add_argument("--labels", type=Path, help="JSON-lines labels (default: the device kind's committed file)")
    args = parser.parse_args(argv)
    kind = device_kind(args.device)
    args.labels = args.labels or LABELS[kind]

    if args.action == "label":
        specs = sample_specs(args.count, seed=args.seed, min_rows=args.min_rows, max_rows=args.max_rows,
                             max_nnz=args.max_nnz, large_fraction=args.large_fraction)
        records = label_corpus(
            specs, args.labels, widths_per_matrix=args.widths_per_matrix, repeats=args.repeats, seed=args.seed,
            progress=lambda i, n, s, sec: print(f"[{i}/{n}] {s.name} {sec:.1f}s", flush=True), device=args.device,
        )
        print(f"{len(records)} samples from {len({r['matrix'] for r in records})} matrices in {args.labels}")
        return 0
    if args.action == "relabel":
        records = relabel_formats(args.labels, args.formats, repeats=args.repeats, device=args.device,
                                  progress=lambda i, n, name, sec: print(f"[{i}/{n}] {name} {sec:.1f}s", flush=True))
        print(f"{', '.join(args.formats)} re-timed on {len(records)} samples in {args.labels}")
        return 0
    if not args.labels.is_file():
        parser.error(f"--labels {args.labels}: no such file (label it first: formats_corpus.py label --device {kind})")
    records = read_records(args.labels)
    out = args.out or SHIPPED_MODELS[records_device(records, expected=kind, source=args.labels)]
    selector = train_and_save(records, out, folds=args.folds, meta={"corpus": str(args.labels)})
    shown = {k: v for k, v in selector.meta.items() if k.startswith(("cv_", "train_", "samples", "matrices"))}
    print(f"{selector} -> {out}\n{shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
