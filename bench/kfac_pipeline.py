"""D-KFAC against SPD-KFAC: the K-FAC training step with factors reduced after backward (D-KFAC)
or pipelined with backward (SPD-KFAC, ``kfac_pipeline=True``), 4 gloo ranks side by side.

Shi, Zhang, Li, "Accelerating Distributed K-FAC with Smart Parallelism of Computing and
Communication Tasks", ICDCS 2021, <https://arxiv.org/abs/2107.06533>: 10-35% over D-KFAC on 64 GPUs.

    python bench/kfac_pipeline.py [--json PATH] [--ranks 4] [--network 1gbit|loopback]
                                  [--width 512] [--layers 4] [--rows 256] [--steps 5] [--rounds 10]

Each rank trains a stack of ``--layers`` square ``--width`` linear layers (ReLU between; factors of
``(width + 1)^2`` floats each, so factor traffic dominates) under DDP on ``--rows`` rows of its own,
with :class:`gnnkit.optim.KFAC` (every step a factor update; inverses only on the first, untimed
step, so the timed steps are forward + backward + gradient and factor all-reduces + preconditioned
Adam step). The two modes take turns over ``--rounds`` rounds of ``--steps`` timed steps each, on
their own models and process groups; the table shows each mode's median training step and median
``optimizer.step()`` (pipelined, a step that inverts nothing waits only for the previous step's
factor reductions, which had its whole forward and backward to finish).
On this 2-core machine the ratio of a run of 3-5 rounds ranged over 0.79-0.94 for the same code
(4 ranks and the delay line share the cores); 10 rounds (50 steps per mode) narrow it. The
``1gbit`` network puts each rank in a network namespace behind the emulated 1 Gbit/s link of
``bench/comm.py`` (:class:`EmulatedNetwork`: needs root); where it cannot run, loopback is used and
the output says so. ``summary["spd_kfac_over_dkfac_step"]`` is pipelined / non-pipelined training
step time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import atomic_write_text  # noqa: E402

MODES = (("dkfac", False), ("spd_kfac", True))


def worker(args: argparse.Namespace) -> None:
    """One rank: both modes in turns; rank 0 writes the timings."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from comm import leave_process_group

    from gnnkit.optim import KFAC

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.ranks)
    generator = torch.Generator().manual_seed(args.rank)
    x = torch.randn(args.rows, args.width, generator=generator)
    y = torch.randint(0, args.width, (args.rows,), generator=generator)
    runs = {}
    for name, pipeline in MODES:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for i in range(args.layers):
            layers += [nn.Linear(args.width, args.width)] + ([nn.ReLU()] if i < args.layers - 1 else [])
        model = DistributedDataParallel(nn.Sequential(*layers))
        opt = KFAC(model.parameters(), lr=1e-3, factor_decay=0.95, factor_update_interval=1,
                   inv_update_interval=10**9, kfac_pipeline=pipeline).bind(model)
        runs[name] = (model, opt)

    def one_step(model, opt) -> tuple[float, float]:
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        before_step = time.perf_counter()
        opt.step()
        end = time.perf_counter()
        return end - start, end - before_step

    for model, opt in runs.values():  # warm-up: the first step also inverts the factors
        one_step(model, opt)
    times: dict[str, dict[str, list[float]]] = {name: {"step": [], "optimizer_step": []} for name, _ in MODES}
    for _ in range(args.rounds):
        for name, _ in MODES:
            for _ in range(args.steps):
                total, opt_step = one_step(*runs[name])
                times[name]["step"].append(total)
                times[name]["optimizer_step"].append(opt_step)
    if args.rank == 0:
        Path(args.out).write_text(json.dumps(times))
    leave_process_group()


def launch(args: argparse.Namespace, out: Path) -> dict:
    """Start the ranks (in namespaces on an emulated network when asked and possible)."""
    from comm import EmulatedNetwork, free_port, run_ranks

    emulation: dict = {"network": "loopback"}
    emulated = None
    if args.network == "1gbit":
        why = EmulatedNetwork.available()
        if why:
            emulation["note"] = f"emulated 1 Gbit/s network unavailable ({why}); ran on loopback"
            print(f"bench/kfac_pipeline.py: {emulation['note']}")
        else:
            emulated = EmulatedNetwork(args.ranks, 1.0, args.delay_ms, build_dir=out.parent)
    master, port = ("10.77.0.1", 29710) if emulated else ("127.0.0.1", free_port())
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--ranks", str(args.ranks),
           "--master", master, "--port", str(port), "--out", str(out), "--width", str(args.width),
           "--layers", str(args.layers), "--rows", str(args.rows), "--steps", str(args.steps),
           "--rounds", str(args.rounds)]
    with emulated if emulated else contextlib.nullcontext():
        if emulated:
            emulation = {"network": "1gbit", **emulated.record()}
        run_ranks(cmd, args.ranks, emulated, args.timeout, "bench/kfac_pipeline.py")
    return {"times": json.loads(out.read_text()), "emulation": emulation}


def summarise(raw: dict, args: argparse.Namespace) -> dict:
    """Medians per mode and the pipelined / non-pipelined ratios."""
    medians = {name: {kind: statistics.median(values) for kind, values in raw["times"][name].items()}
               for name, _ in MODES}
    factor_mb = 2 * args.layers * (args.width + 1) ** 2 * 4 / 2**20
    return {
        "config": {"ranks": args.ranks, "width": args.width, "layers": args.layers, "rows": args.rows,
                   "steps": args.steps, "rounds": args.rounds, "factor_mb_per_step": round(factor_mb, 1),
                   **raw["emulation"]},
        "median_s": medians,
        "samples_s": raw["times"],
        "summary": {
            "spd_kfac_over_dkfac_step": medians["spd_kfac"]["step"] / medians["dkfac"]["step"],
            "spd_kfac_over_dkfac_optimizer_step":
                medians["spd_kfac"]["optimizer_step"] / medians["dkfac"]["optimizer_step"],
            "network": raw["emulation"]["network"],
        },
    }


def print_table(result: dict) -> None:
    med, cfg = result["median_s"], result["config"]
    print(f"K-FAC step, {cfg['ranks']} gloo ranks on {cfg['network']}, {cfg['layers']} x {cfg['width']}-wide "
          f"linear layers, {cfg['rows']} rows/rank, {cfg['factor_mb_per_step']} MiB of factors per step")
    print(f"{'time (median s)':<22}{'D-KFAC':>12}{'SPD-KFAC':>12}{'ratio':>10}")
    for kind, label in (("step", "training step"), ("optimizer_step", "optimizer.step()")):
        a, b = med["dkfac"][kind], med["spd_kfac"][kind]
        print(f"{label:<22}{a:>12.3f}{b:>12.3f}{b / a:>10.3f}")
    if "note" in cfg:
        print(f"note: {cfg['note']}")


def main() -> None:
    from comm import add_worker_args

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--network", choices=("1gbit", "loopback"), default="1gbit")
    parser.add_argument("--delay-ms", type=float, default=0.5)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1200)
    add_worker_args(parser)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="kfac-bench-") as tmp:
        result = summarise(launch(args, Path(tmp) / "times.json"), args)
    print_table(result)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
