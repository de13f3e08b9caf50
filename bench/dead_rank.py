"""A dead or hung rank: how long the survivor of a 2-rank gloo run takes to exit, and what it says.

    python bench/dead_rank.py [--timeout 10] [--json PATH]

Each case starts two ranks on this machine the way ``torchrun`` does (``RANK``/``WORLD_SIZE``/
``MASTER_ADDR`` in the environment, so no rank is the other's parent), trains Lightning's
BoringModel with ``GnnkitStrategy(timeout=...)`` until both ranks have run a few steps, then hits
one rank: ``kill -9`` of rank 1, ``kill -9`` of rank 0 (the rank that hosts the rendezvous store), or
``SIGSTOP`` of rank 1 (a hang: only the collective timeout can end it). The table shows the
survivor's exit status, the seconds from the signal to its exit, and its one-line error.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = (("kill", 1), ("kill", 0), ("stop", 1))
READY = "STEP"


def _worker(timeout_s: float) -> int:
    """One rank (run by :func:`run_case`): train until killed; print the one-line error on failure."""
    sys.path.insert(0, str(ROOT))
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    from gnnkit.comm import GnnkitStrategy, failures

    class Ready(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 3:
                print(READY, flush=True)
            time.sleep(0.005)

    pl.seed_everything(0)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=GnnkitStrategy(timeout=timeout_s),
                         max_steps=10**7, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[Ready()],
                         default_root_dir=tempfile.mkdtemp(prefix="dead-rank-"))
    try:
        trainer.fit(BoringModel())
    except RuntimeError as err:
        if not getattr(err, failures.MARK, False):
            raise
        print(f"gnnkit: error: {err}", file=sys.stderr, flush=True)
        # Leave without the interpreter's teardown: the gloo group the lost rank broke aborts it now and
        # then, after this line (terminate called without an active exception, exit -6). That abort is
        # torch's, not what a case measures; destroying the group first can wait on a dead store host.
        os._exit(1)
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_line(procs: list[subprocess.Popen], text: str, limit_s: float) -> None:
    waiting = {p.stdout: p for p in procs}
    deadline = time.monotonic() + limit_s
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"ranks did not print {text!r} within {limit_s:g}s")
        ready, _, _ = select.select(list(waiting), [], [], left)
        for stream in ready:
            line = stream.readline()
            if not line:
                raise RuntimeError(f"a rank exited before printing {text!r} (exit {waiting[stream].wait()})")
            if line.strip() == text:
                del waiting[stream]


def run_case(fault: str, victim: int, timeout_s: float, limit_s: float = 120.0) -> dict:
    """Start 2 ranks, hit ``victim`` with ``fault`` (``"kill"``: SIGKILL, ``"stop"``: SIGSTOP).

    Every wait is bounded by ``limit_s``; both processes are gone when this returns.

    Returns:
        ``fault``, ``victim``, ``survivor_rc`` (None if it had to be killed), ``seconds`` from the
        signal to the survivor's exit, and ``error``: the survivor's ``gnnkit: error:`` line.
    """
    port = _free_port()
    logs = Path(tempfile.mkdtemp(prefix="dead-rank-logs-"))
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                   RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0", PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        with open(logs / f"rank{rank}.err", "w") as err:
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--timeout", str(timeout_s)],
                                          env=env, stdout=subprocess.PIPE, stderr=err, text=True))
    survivor = procs[1 - victim]
    try:
        _wait_for_line(procs, READY, limit_s)
        os.kill(procs[victim].pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        start = time.monotonic()
        try:
            rc = survivor.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            rc = None
        seconds = time.monotonic() - start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                os.kill(proc.pid, signal.SIGCONT) if fault == "stop" else None
            proc.wait(timeout=30)
            proc.stdout.close()
    text = (logs / f"rank{1 - victim}.err").read_text()
    errors = [line for line in text.splitlines() if line.startswith("gnnkit: error:")]
    return {"fault": fault, "victim": victim, "survivor_rc": rc, "seconds": round(seconds, 2),
            "error": errors[-1] if errors else "", "log": str(logs / f"rank{1 - victim}.err")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=10.0, help="collective timeout in seconds")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.worker:
        sys.exit(_worker(args.timeout))
    results = [run_case(fault, victim, args.timeout) for fault, victim in CASES]
    print(f"{'fault':14} {'survivor exit':>13} {'seconds':>8}  error (timeout {args.timeout:g}s)")
    for r in results:
        print(f"{r['fault'] + ' rank ' + str(r['victim']):14} {str(r['survivor_rc']):>13} {r['seconds']:8.2f}  {r['error']}")
    if args.json:
        sys.path.insert(0, str(ROOT))
        from pipeline import atomic_write_text

        atomic_write_text(args.json, json.dumps({"timeout_s": args.timeout, "cases": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
