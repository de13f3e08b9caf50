"""``gnnkit comm plan``: which communication mode wins for a model size, rank count and network."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gnnkit.arg_types import in_range
from gnnkit.comm.costmodel import MODES, Calibration, explain, plan


def _calibration(args: argparse.Namespace) -> Calibration:
    """The link model: ``--calibration`` (the network ``--network`` names in it) or the default, then
    ``--bandwidth`` and ``--latency``."""
    if args.network is not None and args.calibration is None:
        raise ValueError("comm plan --network: picks one of a --calibration file's networks; give --calibration")
    cal = Calibration.load(args.calibration, args.network) if args.calibration else Calibration()
    return cal.with_bandwidth(args.bandwidth, args.latency)


def _plan(args: argparse.Namespace) -> int:
    try:
        cal = _calibration(args)
    except ValueError as err:
        print(f"gnnkit: error: {err}", file=sys.stderr)
        return 2
    options = dict(density=args.density, streams=args.streams, powersgd_rank=args.powersgd_rank,
                   compute_s=args.compute_ms / 1e3)
    rows = plan(args.params, args.ranks, cal, modes=args.modes, **options)
    base = next(r for r in rows if r.mode == "allreduce") if "allreduce" in args.modes else rows[-1]
    link = f"{args.bandwidth:g} Gb/s" if args.bandwidth else f"{8 / cal.beta / 1e9:.2f} Gb/s (calibrated)"
    print(f"{args.params:,.0f} float32 gradients on {args.ranks} ranks, link {link}, "
          f"latency {cal.alpha * 1e6:.0f} us, "
          f"density {args.density}, {args.streams} streams")
    print(f"{'mode':<16}{'total ms':>10}{'latency':>10}{'bandwidth':>11}{'compute':>10}"
          f"{'MiB/rank':>10}{'vs allreduce':>14}")
    for r in rows:
        print(f"{r.mode:<16}{r.total * 1e3:>10.2f}{r.latency * 1e3:>10.2f}{r.bandwidth * 1e3:>11.2f}"
              f"{r.compute * 1e3:>10.2f}{r.bytes_per_rank / 2**20:>10.2f}{r.total / base.total:>13.2f}x")
    print(explain(rows[0], base, args.params, args.ranks, args.density))
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``comm plan`` to the ``gnnkit`` command."""
    comm = subparsers.add_parser("comm", help="gradient communication tools")
    sub = comm.add_subparsers(dest="comm_command", required=True)
    p = sub.add_parser("plan", help="project each mode's communication time per step")
    p.add_argument("--params", type=in_range(float, 0, above=True), required=True, help="gradient elements (model parameters)")
    p.add_argument("--ranks", type=in_range(int, 2, 1024), required=True, help="number of data-parallel ranks (2..1024)")
    p.add_argument("--bandwidth", type=in_range(float, 0, above=True), default=None, help="link bandwidth in Gb/s")
    p.add_argument("--latency", type=in_range(float, 0), default=None, help="per-message latency in seconds")
    p.add_argument("--density", type=in_range(float, 0, 1, above=True), default=0.01,
                   help="top-k density, in (0, 1]")
    p.add_argument("--streams", type=in_range(int, 1), default=2, help="multistream streams")
    p.add_argument("--powersgd-rank", type=in_range(int, 1), default=1)
    p.add_argument("--compute-ms", type=in_range(float, 0), default=0.0, help="forward+backward time DeAR overlaps")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--calibration", type=Path, default=None,
                   help="JSON from `bench/comm.py --json` (its 'calibration') or Calibration.save")
    p.add_argument("--network", default=None,
                   help="which of the benchmark's calibrations (loopback, 1gbit, 10gbit); default the first")
    p.set_defaults(func=_plan)
