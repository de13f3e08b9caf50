"""Gradient communication benchmark: every GnnkitStrategy mode against dense all-reduce (stock DDP's
averaging) with 4 ranks on this machine, on loopback and on an emulated network, measured side by
side with the cost model's prediction.

    python bench/comm.py [--json PATH] [--png PATH] [--networks loopback 1gbit 10gbit] [--reps 3]
                         [--delay-ms 0.5]

Per network the ranks run the modes' communicators on the gradient buckets (25 MiB, as DDP) of a
GraphSAGE model (synthetic-arxiv recipe: 3 layers, 256 hidden) and of a 25M-parameter model, each
case on process groups of its own; the cases of one size take turns in warmed-up blocks over three
rounds, and the table shows each case's median. The
emulated networks put each rank in its own network namespace (needs root; skipped with a message
otherwise) whose links have the network's bandwidth and a one-way delay (``--delay-ms``, default 0.5).
This kernel has no ``netem`` qdisc, so the delay is emulated in userspace by ``bench/delayline.c``
(compiled at run time): each namespace holds one of its TUN devices, and it forwards packets between
them with per-node uplink/downlink serialisation plus the delay. ``--delay-ms 0`` (or no C compiler)
uses the bandwidth-only setup instead: veth pairs on a bridge shaped by ``tc tbf``. The results
record which emulation ran (``summary["network_emulation"]``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAGE_PARAMS = 2 * 128 * 256 + 256 + 2 * 256 * 256 + 256 + 2 * 256 * 40 + 40 + 4 * 256  # 3-layer SAGE
SIZES = {"sage": SAGE_PARAMS, "25m": 25_000_000}
CALIBRATION_SIZES = {"cal_256k": 262_144, "cal_2m": 2_097_152}
BUCKET = 25 * 2**20 // 4
DENSITY = 0.01
MODES = [("allreduce", {}), ("multistream", {"streams": 2}), ("multistream", {"streams": 4}),
         ("topk_a2a", {"density": DENSITY}), ("topk_allgather", {"density": DENSITY}),
         ("signsgd", {}), ("powersgd", {"rank": 1}), ("dear", {})]
NETWORKS = {"loopback": None, "1gbit": 1.0, "10gbit": 10.0}
MIN_SECONDS, MAX_REPS = 1.0, 60  # short cases repeat until they fill MIN_SECONDS
ROUNDS = 3  # the modes of one size take turns over this many rounds


def label(mode: str, opts: dict) -> str:
    return f"{mode}x{opts['streams']}" if mode == "multistream" else mode


# ---------------------------------------------------------------- worker (one rank)
def mlp(params: int):
    """Square 256- or 4096-wide linear layers (plus one narrower) totalling about ``params``."""
    from torch import nn

    width = 4096 if params > 4e6 else 256
    layers, left = [], params
    while left >= width * width + width:
        layers.append(nn.Linear(width, width))
        left -= width * width + width
    if left > 2 * width:
        layers.append(nn.Linear(width, left // (width + 1)))
    return nn.Sequential(*layers)



def leave_process_group() -> None:
    """End a benchmark rank once every rank is done (after a barrier), without running destructors.

    Destroying a gloo process group joins its worker thread while holding the GIL; when the last
    reference goes with DDP's ``Reducer`` and that thread is still releasing a collective's tensors
    (which needs the GIL), the rank hangs at exit (seen in CI: ``~ProcessGroupGloo`` waiting in
    ``thread::join`` while the thread waits for the GIL). Every result is written before this, so
    the process exits at once instead.
    """
    import torch.distributed as dist

    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from gnnkit import native
    from gnnkit.allocator import retain_freed_memory
    from gnnkit.comm import DeAR, MultiStreamAllReduce, PowerSGD, SignSGD, TopKA2A, TopKAllGather
    from gnnkit.comm.allreduce import AllReduce
    from gnnkit.comm.base import make_layout

    retain_freed_memory()  # as `gnnkit run` does: gradient-sized buffers are reused, not page-faulted
    torch.set_num_threads(1)
    native_select = "select_magnitude" in native.kernels()  # kernels() builds them, before timing
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.ranks)
    classes = {"allreduce": AllReduce, "multistream": MultiStreamAllReduce, "topk_a2a": TopKA2A,
               "topk_allgather": TopKAllGather, "signsgd": SignSGD, "powersgd": PowerSGD, "dear": DeAR}

    def buckets(n: int) -> list[tuple[torch.Tensor, list]]:
        out, start = [], 0
        while start < n:
            size = min(BUCKET, n - start)
            rows = max(1, size // 256)
            shape = (rows, size // rows) if size % rows == 0 else (size,)
            out.append((torch.randn(size), make_layout([(f"p{start}", shape)])))
            start += size
        return out

    def once(comm, data) -> float:
        """One synchronised launch of every bucket, slowest rank's seconds (the same on every rank)."""
        work = [(flat.clone(), layout) for flat, layout in data]
        dist.barrier()
        start = time.perf_counter()
        futures = [comm.launch(flat, layout) for flat, layout in work]
        if isinstance(comm, DeAR):
            comm.finish_backward()
            for w, _, _, _ in comm._gathers:
                w.wait()
            comm._gathers.clear()
        for f in futures:
            f.wait()
        t = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)

    def timed(cases: dict[str, tuple]) -> dict[str, float]:
        """Median seconds of each ``(communicator, buckets)`` case. The cases take turns in blocks
        over ROUNDS rounds, so drift on the shared machine falls on all of them alike; each block
        starts with an untimed launch that warms up connections and allocations after the other
        cases' traffic, then repeats the case as a training run would. Each case runs ``--reps``
        times in all, or as many as fill MIN_SECONDS (at most MAX_REPS) when one is short:
        milliseconds-long cases are noisy."""
        per_round = {}
        for key, (comm, data) in cases.items():
            reps = max(args.reps, min(MAX_REPS, int(MIN_SECONDS / max(once(comm, data), 1e-6))))
            per_round[key] = -(-reps // ROUNDS)
        times: dict[str, list[float]] = {key: [] for key in cases}
        for _ in range(ROUNDS):
            for key, (comm, data) in cases.items():
                once(comm, data)
                times[key] += [once(comm, data) for _ in range(per_round[key])]
        return {key: statistics.median(t) for key, t in times.items()}

    sizes = {k: SIZES[k] for k in args.sizes}
    results: dict = {"comm": {}, "compute": {}, "native_select": native_select}
    for name, n in {**CALIBRATION_SIZES, **sizes}.items():
        data = buckets(n)
        cases = {}
        for mode, opts in MODES:
            if name.startswith("cal") and mode != "allreduce":
                continue
            comm = classes[mode](**opts)
            # process groups of its own: no case inherits connections that another case's traffic
            # warmed up (the default group carries the calibration sizes' megabytes)
            comm.setup(dist.new_group())
            cases[f"{name}/{label(mode, opts)}"] = (comm, data)
        results["comm"].update(timed(cases))
    # local compute constants: each mode on a 1-rank group (no network), all ranks busy at once as
    # in training; per gradient element
    own = [dist.new_group([r]) for r in range(args.ranks)][args.rank]
    big = max(sizes.values())
    data = buckets(big)
    for key, (mode, opts) in (("topk_s", ("topk_a2a", {"density": DENSITY})), ("sign_s", ("signsgd", {})),
                              ("powersgd_s", ("powersgd", {"rank": 1}))):
        comm = classes[mode](**opts)
        comm.setup(own)
        times = []
        for _ in range(3):
            work = [(flat.clone(), layout) for flat, layout in data]  # as in timed(): copies not counted
            start = time.perf_counter()
            for f in [comm.launch(flat, layout) for flat, layout in work]:
                f.wait()
            times.append(time.perf_counter() - start)
        results["compute"][key] = min(times[1:]) / big
    # real DDP training steps of an MLP with each size's parameter count: stock DDP vs each mode
    from gnnkit.comm import CommHook

    results["steps"] = {}
    for name, n in sizes.items():
        for mode, opts in [("ddp", {})] + MODES:
            torch.manual_seed(0)
            net = torch.nn.parallel.DistributedDataParallel(mlp(n), bucket_cap_mb=25)
            comm = None
            if mode != "ddp":
                comm = classes[mode](**opts)
                comm.setup(None)
                net.register_comm_hook(None, CommHook(comm, net.module).__call__)
            opt = torch.optim.SGD(net.parameters(), lr=1e-3)
            inp = torch.randn(32, net.module[0].in_features)
            times = []
            for step in range(args.reps + 1):
                dist.barrier()
                start = time.perf_counter()
                opt.zero_grad()
                net(inp).square().mean().backward()
                if isinstance(comm, DeAR):
                    comm.apply(net.module)
                opt.step()
                t = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                if step:
                    times.append(float(t))
            results["steps"][f"{name}/{mode if mode != 'multistream' else label(mode, opts)}"] = statistics.median(times)
    if args.rank == 0:
        Path(args.out).write_text(json.dumps(results))
    leave_process_group()


# ---------------------------------------------------------------- emulated network
class EmulatedNetwork:
    """``ranks`` network namespaces, removed on exit. With ``delay_ms`` > 0 each namespace holds
    one TUN device of ``bench/delayline.c``, a userspace switch that gives every node an uplink
    and a downlink of ``gbit`` plus ``delay_ms`` one-way delay (this kernel has no netem qdisc).
    With ``delay_ms`` 0, or without a C compiler, the namespaces sit on one bridge behind veth
    pairs shaped by ``tc tbf`` in both directions: bandwidth only. ``method`` says which ran,
    ``note`` why the delay line did not."""

    def __init__(self, ranks: int, gbit: float, delay_ms: float = 0.5, build_dir: Path | None = None) -> None:
        self.ranks, self.gbit, self.delay_ms = ranks, gbit, delay_ms
        self.build_dir = build_dir
        self.ns = [f"gkcomm{i}" for i in range(ranks)]
        self.line: subprocess.Popen | None = None
        self.method, self.note = "veth+tbf", ""

    @staticmethod
    def available() -> str:
        """Empty when namespaces can be used, else why not."""
        if os.geteuid() != 0:
            return "needs root (network namespaces, veth, tc)"
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                return f"needs the {tool!r} command"
        return ""

    @staticmethod
    def build_delay_line(build_dir: Path) -> Path | str:
        """``bench/delayline.c`` compiled into ``build_dir`` (once), or why it could not be."""
        exe = build_dir / "delayline"
        if exe.exists():
            return exe
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            return "no C compiler for bench/delayline.c"
        done = subprocess.run([cc, "-O2", "-o", str(exe), str(ROOT / "bench" / "delayline.c")],
                              capture_output=True, text=True)
        return exe if done.returncode == 0 else f"bench/delayline.c did not compile: {done.stderr.strip()[-300:]}"

    def _sh(self, *cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    def _in(self, i: int, *cmd: str) -> None:
        self._sh("ip", "netns", "exec", self.ns[i], *cmd)

    def __enter__(self) -> "EmulatedNetwork":
        self.__exit__()  # leftovers of an interrupted run
        self.method, self.note = "veth+tbf", ""
        exe: Path | str = ""
        if self.delay_ms > 0:
            exe = self.build_delay_line(self.build_dir or Path(tempfile.mkdtemp(prefix="gkcomm-")))
            if isinstance(exe, str):
                self.note = f"{exe}: link delay not emulated, bandwidth only"
                print(f"emulated network: {self.note}")
        try:
            self._start_delay_line(exe) if isinstance(exe, Path) else self._start_veth_tbf()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_delay_line(self, exe: Path) -> None:
        self.line = subprocess.Popen(
            [str(exe), "--delay-us", str(round(self.delay_ms * 1000)), "--rate-mbit", str(round(self.gbit * 1000)),
             "--prefix", "gkd", "--count", str(self.ranks), "--base", "10.77.0.1"],
            stdout=subprocess.PIPE, text=True)
        if self.line.stdout.readline().strip() != "ready":  # __enter__ cleans up
            raise SystemExit("bench/comm.py: bench/delayline.c did not start")
        for i, ns in enumerate(self.ns):
            self._sh("ip", "netns", "add", ns)
            self._sh("ip", "link", "set", f"gkd{i}", "netns", ns)  # the fd stays with the delay line
            self._in(i, "ip", "addr", "add", f"10.77.0.{i + 1}/24", "dev", f"gkd{i}")
            self._in(i, "ip", "link", "set", f"gkd{i}", "txqueuelen", "1000", "up")
            self._in(i, "ip", "link", "set", "lo", "up")
        self.method = "tun delay line"

    def _start_veth_tbf(self) -> None:
        self._sh("ip", "link", "add", "gkcommbr", "type", "bridge")
        self._sh("ip", "link", "set", "gkcommbr", "up")
        rate = f"{self.gbit}gbit"
        for i, ns in enumerate(self.ns):
            self._sh("ip", "netns", "add", ns)
            self._sh("ip", "link", "add", f"gkc{i}h", "type", "veth", "peer", "name", f"gkc{i}n")
            self._sh("ip", "link", "set", f"gkc{i}n", "netns", ns)
            self._sh("ip", "link", "set", f"gkc{i}h", "master", "gkcommbr")
            self._sh("ip", "link", "set", f"gkc{i}h", "up")
            self._in(i, "ip", "addr", "add", f"10.77.0.{i + 1}/24", "dev", f"gkc{i}n")
            self._in(i, "ip", "link", "set", f"gkc{i}n", "up")
            self._in(i, "ip", "link", "set", "lo", "up")
            burst = f"{max(64, int(self.gbit * 128))}kb"
            self._sh("tc", "qdisc", "add", "dev", f"gkc{i}h", "root", "tbf", "rate", rate, "burst", burst,
                     "latency", "100ms")
            self._in(i, "tc", "qdisc", "add", "dev", f"gkc{i}n", "root", "tbf",
                     "rate", rate, "burst", burst, "latency", "100ms")

    def __exit__(self, *exc: object) -> None:
        if self.line is not None:  # its TUN devices vanish with it
            self.line.terminate()
            try:
                self.line.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.line.kill()
                self.line.wait()
            self.line = None
        for i, ns in enumerate(self.ns):
            subprocess.run(["ip", "link", "del", f"gkc{i}h"], capture_output=True)
            subprocess.run(["ip", "link", "del", f"gkd{i}"], capture_output=True)  # not moved yet
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", "gkcommbr"], capture_output=True)

    def prefix(self, rank: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns[rank]]

    def env(self, rank: int) -> dict[str, str]:
        return {"GLOO_SOCKET_IFNAME": f"gkd{rank}" if self.method == "tun delay line" else f"gkc{rank}n"}

    def record(self) -> dict:
        """What ran, for the results."""
        return {"delay_ms": self.delay_ms if self.method == "tun delay line" else 0.0, "method": self.method,
                "rate_gbit": self.gbit, **({"note": self.note} if self.note else {})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: argparse.Namespace, network: str, out: Path) -> dict:
    """Run the ranks for one network; returns rank 0's measurements."""
    gbit = NETWORKS[network]
    emulated = EmulatedNetwork(args.ranks, gbit, args.delay_ms, build_dir=out.parent) if gbit else None
    master = "10.77.0.1" if emulated else "127.0.0.1"
    port = 29700 if emulated else free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--ranks", str(args.ranks),
           "--sizes", *args.sizes,
           "--reps", str(args.reps), "--master", master, "--port", str(port), "--out", str(out)]
    with emulated if emulated else contextlib.nullcontext():
        run_ranks(cmd, args.ranks, emulated, args.timeout, f"bench/comm.py: {network}")
    raw = json.loads(out.read_text())
    if emulated:
        raw["network_emulation"] = emulated.record()
    return raw


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    """The hidden options :func:`run_ranks`' worker processes are started with."""
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--master", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)


def run_ranks(cmd: list[str], ranks: int, emulated: "EmulatedNetwork | None", timeout: float, label: str) -> None:
    """Run ``cmd --rank R`` for every rank (one thread each; in its namespace of ``emulated``) and
    wait for all; past ``timeout`` seconds, or when a rank fails, exit with a line starting ``label``."""
    procs = []
    for rank in range(ranks):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               **(emulated.env(rank) if emulated else {})}
        prefix = emulated.prefix(rank) if emulated else []
        procs.append(subprocess.Popen(prefix + cmd + ["--rank", str(rank)], env=env))
    deadline = time.time() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise SystemExit(f"{label}: the run exceeded {timeout}s") from None
    if any(p.returncode for p in procs):
        raise SystemExit(f"{label}: a rank failed")


def emulation_note(results: dict) -> str:
    """How the emulated networks that ran were built, for the printed footnote."""
    done = {json.dumps(r["raw"]["network_emulation"], sort_keys=True) for r in results.values()
            if "network_emulation" in r["raw"]}
    notes = []
    for e in map(json.loads, sorted(done)):
        if e["method"] == "tun delay line":
            notes.append(f"{e['rate_gbit']:g} Gbit/s with {e['delay_ms']:g} ms one-way delay by the userspace "
                         f"delay line bench/delayline.c (this kernel has no netem qdisc)")
        else:
            notes.append(f"{e['rate_gbit']:g} Gbit/s by veth+tc tbf, no link delay"
                         + (f" ({e['note']})" if e.get("note") else ""))
    return "; ".join(notes) or "none ran"


# ---------------------------------------------------------------- analysis
def analyse(network: str, raw: dict, ranks: int, sizes: dict[str, int]) -> dict:
    from gnnkit.comm.costmodel import BYTES, Calibration, estimate, fit_alpha_beta, relative_error

    comm = raw["comm"]
    samples = []
    for name, n in {**CALIBRATION_SIZES, **sizes}.items():
        buckets = -(-n // BUCKET)
        samples.append((2 * (ranks - 1) * buckets, 2 * (ranks - 1) / ranks * n * BYTES, comm[f"{name}/allreduce"]))
    alpha, beta = fit_alpha_beta(samples)
    big = max(sizes, key=sizes.get)
    best_ms = min(comm[f"{big}/multistreamx2"], comm[f"{big}/multistreamx4"])
    gain = max(1.0, comm[f"{big}/allreduce"] / best_ms)
    gbit = NETWORKS[network]
    cal = Calibration(alpha=alpha, beta=beta, link_beta=(8 / (gbit * 1e9)) if gbit else 0.0,
                      stream_parallelism=gain, **{k: v for k, v in raw["compute"].items() if k.endswith("_s")})
    rows = []
    for size, n in sizes.items():
        buckets = -(-n // BUCKET)
        base = comm[f"{size}/allreduce"]
        ddp_step = raw["steps"][f"{size}/ddp"]
        for mode, opts in MODES:
            key = label(mode, opts)
            measured = comm[f"{size}/{key}"]
            per_bucket = n / buckets
            est = estimate(mode, per_bucket, ranks, cal, density=DENSITY, streams=opts.get("streams", 2),
                           powersgd_rank=1, layer_width=256)
            predicted = est.total * buckets
            rows.append({"network": network, "size": size, "params": n, "mode": key, "measured_s": measured,
                         "predicted_s": predicted, "over_allreduce": measured / base,
                         "step_s": raw["steps"][f"{size}/{key}"], "ddp_step_s": ddp_step,
                         "step_throughput_vs_ddp": ddp_step / raw["steps"][f"{size}/{key}"],
                         "model_error": relative_error(measured, predicted)})
    return {"calibration": cal.__dict__, "rows": rows}


def print_table(rows: list[dict]) -> None:
    head = (f"{'network':<9}{'size':<6}{'mode':<15}{'ours ms':>10}{'allreduce ms':>14}{'ratio':>8}"
            f"{'step thr.':>10}{'model ms':>10}{'err':>7}")
    print(head)
    print("-" * len(head))
    base = {(r["network"], r["size"]): r["measured_s"] for r in rows if r["mode"] == "allreduce"}
    for r in rows:
        print(f"{r['network']:<9}{r['size']:<6}{r['mode']:<15}{r['measured_s'] * 1e3:>10.2f}"
              f"{base[(r['network'], r['size'])] * 1e3:>14.2f}{r['over_allreduce']:>7.2f}x"
              f"{r['step_throughput_vs_ddp']:>9.2f}x{r['predicted_s'] * 1e3:>10.2f}{r['model_error'] * 100:>6.0f}%")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline import save_figure

    networks = list(dict.fromkeys(r["network"] for r in rows))
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    fig, axes = plt.subplots(len(sizes), len(networks), figsize=(4.5 * len(networks), 3.6 * len(sizes)),
                             squeeze=False)
    for ax, (size, network) in zip(axes.flat, [(s, n) for s in sizes for n in networks]):
        sel = [r for r in rows if r["network"] == network and r["size"] == size]
        xs = range(len(sel))
        ax.bar([x - 0.2 for x in xs], [r["measured_s"] * 1e3 for r in sel], 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], [r["predicted_s"] * 1e3 for r in sel], 0.4, label="cost model")
        ax.set_xticks(list(xs), [r["mode"] for r in sel], rotation=60, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{network}, {size} params")
        ax.set_ylabel("comm ms / step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write results and summary here")
    parser.add_argument("--png", type=Path, default=Path("bench/comm.png"))
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=list(NETWORKS))
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES),
                        help="gradient sizes (the summary needs both)")
    parser.add_argument("--reps", type=int, default=3,
                        help="repetitions per case at least (short cases repeat to fill MIN_SECONDS)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--delay-ms", type=float, default=0.5,
                        help="one-way link delay of the emulated networks (0: bandwidth only, veth+tbf)")
    add_worker_args(parser)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    results, rows, skipped = {}, [], {}
    load_start = os.getloadavg()[0]  # other users' load skews absolute times (ratios hold better)
    with tempfile.TemporaryDirectory() as tmp:
        for network in args.networks:
            if NETWORKS[network] and (why := EmulatedNetwork.available()):
                skipped[network] = why
                print(f"skipping {network}: emulated network {why}")
                continue
            start = time.time()
            raw = launch(args, network, Path(tmp) / f"{network}.json")
            results[network] = {"raw": raw, **analyse(network, raw, args.ranks, {k: SIZES[k] for k in args.sizes})}
            rows += results[network]["rows"]
            print(f"{network}: {time.time() - start:.0f}s")
    print(f"\n{args.ranks} ranks, gloo, 25 MiB buckets, density {DENSITY}; ratio = ours / dense all-reduce "
          f"(comm time); step thr. = measured DDP training steps/s of an MLP of that size, ours / stock DDP; "
          f"model = cost model with alpha/beta fitted to all-reduce, compute constants from each lossy "
          f"mode run on a 1-rank group, stream parallelism from the 25M multistream runs. Emulated "
          f"links: {emulation_note(results)}.")
    print_table(rows)

    def get(network: str, size: str, mode: str) -> dict | None:
        return next((r for r in rows if (r["network"], r["size"], r["mode"]) == (network, size, mode)), None)

    summary: dict = {}
    a2a = get("1gbit", "25m", "topk_a2a")
    summary["topk_a2a_over_allreduce_1gbps"] = round(a2a["over_allreduce"], 4) if a2a else None
    allgather = get("1gbit", "25m", "topk_allgather")
    summary["topk_allgather_over_allreduce_1gbps"] = round(allgather["over_allreduce"], 4) if allgather else None
    by_case = {}
    for network, size in sorted({(r["network"], r["size"]) for r in rows}):
        options = [r for r in rows if (r["network"], r["size"]) == (network, size) and r["mode"].startswith("multistream")]
        best = min(options, key=lambda r: r["over_allreduce"])
        by_case[f"{network}/{size}"] = {"best_streams": int(best["mode"].split("x")[1]),
                                        "ratio": round(best["over_allreduce"], 4)}
    # the case: the emulated link with the small (latency-bound) SAGE gradients
    headline = next(c for c in ("1gbit/sage", "loopback/sage", *by_case) if c in by_case)
    summary["multistream_over_allreduce"] = by_case[headline]["ratio"]
    summary["multistream_best_streams"] = by_case[headline]["best_streams"]
    summary["multistream_case"] = headline
    summary["multistream_by_case"] = by_case
    summary["model_error"] = round(statistics.median(r["model_error"] for r in rows), 4)
    summary["network_emulation"] = {n: r["raw"]["network_emulation"] for n, r in results.items()
                                    if "network_emulation" in r["raw"]}
    summary["skipped"] = skipped
    summary["load_average_1min"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]
    print("\nsummary:", json.dumps(summary))
    plot(rows, args.png)
    print(f"plot: {args.png}")
    if args.json:
        from pipeline import atomic_write_text

        atomic_write_text(args.json, json.dumps({"summary": summary, "rows": rows, "networks": results,
                                         "calibration": {n: r["calibration"] for n, r in results.items()}},
                                        indent=2) + "\n")
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
