"""Resuming a run: the resumed run's per-epoch losses are the uninterrupted run's.

Each case trains quickstart on synthetic-tiny for 3 epochs twice, once straight through and once
stopped by an error in epoch 1 (``GNNKIT_TEST_FAULT=raise@1``, after ``last.ckpt`` covers epoch 0)
and continued with ``gnnkit run --resume``; in-process, so each run takes about a second.
The kill -9 and torchrun cases at the end run ``gnnkit run`` in other processes.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gnnkit import resume
from gnnkit.fault_injection import EXIT_CODE, FAULT_ENV, InjectedFault
from gnnkit.resume import (RUN_DIR_ENV, ResumeError, claimed_run_dir, epochs_done, parse_run_args, plan_run,
                           say_what_the_folder_holds, trim_metrics)
from gnnkit.run import run
from gnnkit.set_aside import SetAside

REPO = Path(__file__).parents[2]
QUICKSTART = str(REPO / "recipes" / "quickstart.yaml")
EPOCHS = 3
SAMPLED = ["--data.batch_size", "1024", "--data.num_neighbors", "[4,4]"]
CASES = {
    "full_batch": [],
    "sampled": SAMPLED,
    "reuse": [*SAMPLED, "--data.reuse.epochs", "2", "--data.reuse.loader", "torch", "--data.reuse.feature_dtype",
              "float32"],
    "tt": ["--model.embedding", "tt", "--model.embedding_dim", "16", "--model.tt_hot_rows", "64"],
    "gnnkit_aggregation": [*SAMPLED, "--model.aggregation", "gnnkit"],
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    monkeypatch.setenv(RUN_DIR_ENV, "")  # `run` sets it for the ranks it starts; restored afterwards
    monkeypatch.delenv(FAULT_ENV, raising=False)


def epoch_rows(run_dir: Path) -> dict[int, dict[str, float]]:
    """``metrics.csv`` as {epoch: {column: value}} (train and val rows merged), checking that no
    epoch's row is there twice."""
    rows: dict[int, dict[str, float]] = {}
    with open(run_dir / "metrics.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            values = {k: float(v) for k, v in row.items() if v not in ("", None) and k not in ("epoch", "step")}
            merged = rows.setdefault(int(row["epoch"]), {})
            assert not set(values) & set(merged), f"epoch {row['epoch']} logged twice: {values}"
            merged.update(values)
    return rows


def losses(run_dir: Path) -> torch.Tensor:
    """[epochs, 2]: train and validation loss of every training epoch."""
    rows = epoch_rows(run_dir)
    return torch.tensor([[rows[e]["train_loss"], rows[e]["val_loss"]] for e in range(EPOCHS)])


def interrupted_and_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> Path:
    run_dir = tmp_path / "resumed"
    monkeypatch.setenv(FAULT_ENV, "raise@1")
    with pytest.raises(InjectedFault):
        run(QUICKSTART, [*args, "--trainer.max_epochs", str(EPOCHS), "--run_dir", str(run_dir)])
    monkeypatch.delenv(FAULT_ENV)
    assert sorted(epoch_rows(run_dir)) == [0]
    run("--resume", [str(run_dir)])
    return run_dir


@pytest.mark.parametrize("case", CASES)
def test_resumed_run_has_the_uninterrupted_runs_losses(tmp_path, monkeypatch, case):
    _check_resume(tmp_path, monkeypatch, case, [])


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["sampled", "reuse"])
def test_a_resumed_gpu_run_with_prefetched_batches_has_the_uninterrupted_runs_losses(tmp_path, monkeypatch, case):
    """On a GPU the batches are made ahead (data.prefetch): the checkpoint keeps the sampler state of
    the batches trained on, so the resumed run trains on the same ones (GPU sums in varying order:
    the losses agree to rounding, not to the bit). Batches of 256 give passes of several batches, so
    the sanity check gives one up with batches made ahead; and a run whose batches are made on demand
    (data.prefetch 0) trains on the same ones."""
    extra = ["--trainer.accelerator", "gpu", "--data.batch_size", "256", "--data.prefetch", "2"]
    _check_resume(tmp_path, monkeypatch, case, extra, rtol=1e-3, test_atol=0.01)
    plain = tmp_path / "on-demand"
    args = [*CASES[case], *extra[:-1], "0"]
    if case == "reuse":
        args += ["--data.reuse.cache_dir", str(tmp_path / "batches-on-demand")]
    run(QUICKSTART, [*args, "--trainer.max_epochs", str(EPOCHS), "--run_dir", str(plain)])
    torch.testing.assert_close(losses(plain), losses(tmp_path / "straight"), rtol=1e-3, atol=1e-6)


def _format_counts(report: dict) -> dict[str, dict[str, int]]:
    return {layer: plan["counts"] for layer, plan in (report.get("formats") or {}).items()}


def _check_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, extra: list[str],
                  rtol: float = 1e-5, test_atol: float = 0.0) -> None:
    args = [*CASES[case], *extra]
    if case == "reuse":  # one batch cache per run: the resumed run replays what it recorded itself
        args += ["--data.reuse.cache_dir", str(tmp_path / "batches-straight")]
    straight = tmp_path / "straight"
    run(QUICKSTART, [*args, "--trainer.max_epochs", str(EPOCHS), "--run_dir", str(straight)])
    if case == "reuse":
        args[-1] = str(tmp_path / "batches-resumed")
    resumed = interrupted_and_resumed(tmp_path, monkeypatch, args)
    torch.testing.assert_close(losses(resumed), losses(straight), rtol=rtol, atol=1e-6)
    report = json.loads((resumed / "report.json").read_text())
    straight_report = json.loads((straight / "report.json").read_text())
    assert report["epochs"] == EPOCHS and abs(report["test"] - straight_report["test"]) <= test_atol
    # the products of every epoch, not of the last process's (nor the sanity check it ran again)
    assert _format_counts(report) == _format_counts(straight_report)
    if case == "gnnkit_aggregation":
        assert sum(_format_counts(report)["layer0"].values()) > 0
    if case == "reuse":  # the whole schedule: recorded in epoch 0 (before the stop), replayed in 1, fresh in 2
        assert report["reuse"]["epochs"] == {"record": 1, "replay": 1, "fresh": 1}
    assert (resumed / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_last_checkpoint_is_written_every_epoch_beside_best(tmp_path, monkeypatch):
    run_dir = tmp_path / "r"
    monkeypatch.setenv(FAULT_ENV, "raise@3")
    with pytest.raises(InjectedFault):
        run(QUICKSTART, ["--trainer.max_epochs", "5", "--run_dir", str(run_dir)])
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["best.ckpt", "last.ckpt"]  # no temp file left beside them
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"] == 3


def test_resume_takes_more_epochs_and_the_ckpt_path(tmp_path):
    run_dir = tmp_path / "r"
    run(QUICKSTART, ["--trainer.max_epochs", "2", "--run_dir", str(run_dir)])
    config = (run_dir / "config.yaml").read_text()
    for overrides, message in [
        (["--model.lr", "0.05"], "--model.lr would change what its checkpoint holds"),  # ignored before
        (["--model.hidden_channels=32"], "--model.hidden_channels would change"),  # a size-mismatch traceback
        (["--trainer.max_epochs", "1"], "it has trained 2 epochs, and --trainer.max_epochs 1 is fewer"),
    ]:
        with pytest.raises(ResumeError, match=f"^gnnkit run --resume {run_dir}: {message}"):
            run("--resume", [str(run_dir), *overrides])
    assert (run_dir / "config.yaml").read_text() == config  # refused before config.yaml was rewritten
    report = run("--resume", [str(run_dir), "--trainer.max_epochs", "3", "--ckpt_path", "best",
                              "--data.num_workers", "0"])
    assert report["epochs"] == 3 and sorted(epoch_rows(run_dir)) == [0, 1, 2, 3]  # epoch 3: the test row
    # another optimizer's state: it loaded, and Adam's first step failed with KeyError: 'betas'
    with pytest.raises(ResumeError, match="checkpoints/last.ckpt: the checkpoint's optimizer state is another "
                                          "optimizer's: its parameter groups set .*, which SGD does not take"):
        run(QUICKSTART, ["--trainer.max_epochs", "4", "--run_dir", str(tmp_path / "sgd" / "new"), "--optimizer",
                         "torch.optim.SGD", "--optimizer.lr", "0.1",
                         "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt")])
    assert not (tmp_path / "sgd").exists()  # the refused run's folder (it held only config.yaml), and its parent


def test_a_run_refused_inside_fit_leaves_no_folder_but_keeps_one_that_was_there(tmp_path, monkeypatch):
    """A run refused in fit before training started (another optimizer's state in the checkpoint)
    left runs/<recipe>-<time>/ holding only config.yaml and hparams.yaml; a folder that was there
    before the run (--run_dir, --resume) is the user's and stays."""
    run_dir = tmp_path / "r"
    run(QUICKSTART, ["--trainer.max_epochs", "1", "--run_dir", str(run_dir)])
    sgd = ["--optimizer", "torch.optim.SGD", "--optimizer.lr", "0.1",
           "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt")]
    (tmp_path / "elsewhere").mkdir()
    _one_second(monkeypatch, tmp_path / "elsewhere", "T")
    with pytest.raises(ResumeError, match="which SGD does not take"):
        run(QUICKSTART, sgd)
    assert not (tmp_path / "elsewhere" / "runs").exists()  # the claimed folder, and the runs/ made for it
    (tmp_path / "elsewhere" / "runs" / "mine").mkdir(parents=True)  # runs/ was there before: it stays
    with pytest.raises(ResumeError, match="which SGD does not take"):
        run(QUICKSTART, sgd)
    assert [p.name for p in (tmp_path / "elsewhere" / "runs").iterdir()] == ["mine"]
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(ResumeError, match="which SGD does not take"):
        run(QUICKSTART, [*sgd, "--run_dir", str(kept)])
    assert (kept / "notes.txt").read_text() == "mine"
    earlier = _folder_bytes(run_dir)
    with pytest.raises(ResumeError, match="which SGD does not take"):
        run(QUICKSTART, [*sgd, "--run_dir", str(run_dir)])
    assert _folder_bytes(run_dir) == earlier  # its metrics and best.ckpt were lost, config.yaml rewritten


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _torch_file(path: Path, value: object) -> Path:
    torch.save(value, path)
    return path


def test_a_file_that_is_no_checkpoint_is_refused_before_the_run_starts(tmp_path, monkeypatch):
    """Text (torch's unpickler failed in fit: `IndexError: pop from empty list`), a zip of other
    files, and a torch file without a state_dict are refused by the plan, before a run folder is made."""
    import zipfile

    monkeypatch.chdir(tmp_path)
    Path("some.txt").write_text("some text\n")
    with zipfile.ZipFile("other.zip", "w") as archive:
        archive.writestr("a.txt", "a")
    _torch_file(tmp_path / "weights.pt", {"w": torch.zeros(2)})
    _torch_file(tmp_path / "only.ckpt", {"state_dict": {"w": torch.zeros(2)}, "epoch": 0})
    for name, what in [("some.txt", r"not a checkpoint \(not a zip file; expected a Lightning checkpoint"),
                       ("other.zip", r"not a checkpoint torch can read \(.+; expected a Lightning checkpoint"),
                       ("weights.pt", r"a torch file but not a checkpoint \(it holds no state_dict"),
                       ("only.ckpt", r"the checkpoint holds the weights only \(a ModelCheckpoint with save_weights")]:
        with pytest.raises(ResumeError, match=rf"^gnnkit run --ckpt_path {name}: {what}"):
            plan_run(parse_run_args([QUICKSTART, "--ckpt_path", name]))
        with pytest.raises(ResumeError, match=rf"^gnnkit run --ckpt_path {name}: {what}"):
            run(QUICKSTART, ["--ckpt_path", name])
        assert not Path("runs").exists()
    done = tmp_path / "done"  # a run folder whose last.ckpt is no checkpoint
    (done / "checkpoints").mkdir(parents=True)
    (done / "config.yaml").write_text("model: {}\n")
    (done / "checkpoints" / "last.ckpt").write_text("cut")
    with pytest.raises(ResumeError, match=rf"^gnnkit run --resume {done} \({done}/checkpoints/last.ckpt\): not a "
                                          r"checkpoint \(not a zip file"):
        plan_run(parse_run_args(["--resume", str(done)]))


def test_a_checkpoint_of_another_model_or_graph_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch,
                                                                                  make_ogb_folder):
    """A SAGE model's checkpoint given to a GCN recipe (or to a wider model, or a graph of another
    feature width) failed in fit with torch's many-line `Error(s) in loading state_dict for
    NodeClassifier`, after config.yaml was written."""
    trained = tmp_path / "q"
    run(QUICKSTART, ["--trainer.max_epochs", "1", "--run_dir", str(trained)])
    last = str(trained / "checkpoints" / "last.ckpt")
    (tmp_path / "elsewhere").mkdir()
    _one_second(monkeypatch, tmp_path / "elsewhere", "T")
    start = rf"^gnnkit run --ckpt_path {last}: the checkpoint's weights do not fit the recipe's model \("
    advice = rf"; give the recipe and options it was trained with \({trained}/config.yaml\), or start without"
    cases = [
        ([str(REPO / "recipes" / "gcn_citation.yaml")], r"the model's gnn\.layers\.0\.bias is missing from the "
         r"checkpoint, and \d+ more difference\(s\)\); it was trained with model\.model sage \(here gcn\), "
         r"model\.hidden_channels 64 \(here 16\), model\.batch_norm true \(here false\)"),
        ([QUICKSTART, "--model.hidden_channels", "32"], r"gnn\.layers\.0\.lin_l\.weight is \[64, 32\] in the "
         r"checkpoint, \[32, 32\] in the model, .*\); it was trained with model\.hidden_channels 64 \(here 32\)"),
        ([QUICKSTART, "--data.dataset", str(make_ogb_folder())], r"gnn\.layers\.0\.lin_l\.weight is \[64, 32\] in "
         r"the checkpoint, \[64, 8\] in the model, .*\); it was trained with .*the data's in_channels 32 \(here 8\)"),
    ]
    for (recipe, *overrides), problem in cases:
        with pytest.raises(ResumeError, match=start + problem + ".*" + advice) as refused:
            run(recipe, [*overrides, "--ckpt_path", last])
        assert "\n" not in str(refused.value)
        assert not (tmp_path / "elsewhere" / "runs").exists()
    run(QUICKSTART, ["--trainer.max_epochs", "2", "--ckpt_path", last])  # its own recipe's model: it continues


@pytest.mark.parametrize("argv,message", [
    (["--resume", "nowhere"], "gnnkit run --resume nowhere: no config.yaml there"),
    ([QUICKSTART, "--ckpt_path", "missing.ckpt"], "gnnkit run --ckpt_path missing.ckpt: no such checkpoint file"),
    (["--trainer.max_epochs", "2"], "gnnkit run: expected a recipe"),
    (["--resume"], "gnnkit run --resume: expected a value"),
])
def test_bad_resume_requests_are_one_line(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ResumeError, match=f"^{message}"):
        plan_run(parse_run_args(argv))
    with pytest.raises(ResumeError, match=f"^{message}"):
        run(argv[0], argv[1:])


def test_folders_that_cannot_hold_or_continue_a_run_are_one_line(tmp_path, monkeypatch, gnnkit_log):
    """A file given as the run folder; a finished run without checkpoints given to --resume (it was
    trained again from its first epoch, over its results); a checkpoint torch cannot read (a
    traceback from inside torch.load); and a word when a run starts afresh over an earlier one."""
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("")
    with pytest.raises(ResumeError, match="^gnnkit run: the run folder afile is a file"):
        plan_run(parse_run_args([QUICKSTART, "--run_dir", "afile"]))
    for under in ("afile/sub", "afile/sub/deeper"):  # mkdir's NotADirectoryError, once the data was read
        with pytest.raises(ResumeError, match=f"^gnnkit run: the run folder {under} is under afile, which is a file, "
                                              r"not a folder \(expected a folder, or a path to make one\)$"):
            plan_run(parse_run_args([QUICKSTART, "--run_dir", under]))
    done = tmp_path / "done"
    done.mkdir()
    (done / "config.yaml").write_text("model: {}\n")
    (done / "report.json").write_text("{}")
    with pytest.raises(ResumeError, match="the run finished without checkpoints .* nothing to continue from"):
        plan_run(parse_run_args(["--resume", str(done)]))
    bad = tmp_path / "bad.ckpt"
    bad.write_text("garbage")
    with pytest.raises(ResumeError, match=f"^gnnkit run: {bad}: unreadable checkpoint \\(.*\\); give another"):
        epochs_done(bad)
    plan = plan_run(parse_run_args([QUICKSTART, "--run_dir", str(done)]))
    assert "earlier run" not in gnnkit_log.text  # said once the run's settings are taken
    say_what_the_folder_holds(plan)
    assert f"{done} holds an earlier run: this one starts afresh" in gnnkit_log.text
    gnnkit_log.clear()
    monkeypatch.setenv("RANK", "1")  # another rank of a new run finds the config.yaml rank 0 just wrote
    say_what_the_folder_holds(plan_run(parse_run_args([QUICKSTART, "--run_dir", str(done)])))
    assert "earlier run" not in gnnkit_log.text
    monkeypatch.delenv("RANK")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    say_what_the_folder_holds(plan_run(parse_run_args([QUICKSTART, "--run_dir", str(other)])))
    assert f"{other} is not empty and holds no run: the run's files are written among what is there" in gnnkit_log.text


def _one_second(monkeypatch: pytest.MonkeyPatch, folder: Path, now: str) -> None:
    """Runs made in ``folder`` with no run folder given, all at the time ``now``."""
    monkeypatch.chdir(folder)
    monkeypatch.delenv(RUN_DIR_ENV)
    monkeypatch.setattr(resume, "time", SimpleNamespace(strftime=lambda fmt: now))


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    """Two runs of one recipe in one second (a sweep's) made up the same runs/<recipe>-<time> and
    shared it; and a run left GNNKIT_RUN_DIR set, so the next run() of the process took its folder."""
    _one_second(monkeypatch, tmp_path, "20261128-010203")
    folders = [Path(run(QUICKSTART, ["--trainer.max_epochs", "1"])["best_checkpoint"]).parents[1] for _ in range(2)]
    assert RUN_DIR_ENV not in os.environ
    names = ["quickstart-20261128-010203", "quickstart-20261128-010203-2"]
    assert [Path(f).name for f in folders] == names and sorted(p.name for p in (tmp_path / "runs").iterdir()) == names
    assert all((tmp_path / "runs" / name / "report.json").is_file() for name in names)


def test_a_made_up_run_folder_is_claimed_atomically_and_given_back_if_setting_up_fails(tmp_path, monkeypatch):
    _one_second(monkeypatch, tmp_path, "T")
    plans = [plan_run(parse_run_args([QUICKSTART])) for _ in range(8)]
    assert {p.run_dir for p in plans} == {Path("runs/quickstart-T")} and all(p.claim for p in plans)
    claims = [claimed_run_dir(p) for p in plans]  # kept: a claim left unfinished gives its folder back
    with ThreadPoolExecutor(8) as pool:  # mkdir is atomic: no two claims get one folder
        claimed = list(pool.map(lambda claim: claim.__enter__(), claims))
    assert sorted(p.name for p in claimed) == ["quickstart-T", *[f"quickstart-T-{n}" for n in range(2, 9)]]
    assert [p.run_dir for p in plans] == claimed
    failing = plan_run(parse_run_args([str(QUICKSTART)]))
    with pytest.raises(SystemExit), claimed_run_dir(failing) as folder:  # e.g. --print_config's exit
        assert folder.name == "quickstart-T-9" and folder.is_dir()
        raise SystemExit(0)
    assert not folder.exists() and (tmp_path / "runs").is_dir()  # runs/ was there before: kept
    given = plan_run(parse_run_args([QUICKSTART, "--run_dir", "mine"]))
    with claimed_run_dir(given) as folder:
        assert folder == Path("mine") and not given.claim and not folder.exists()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's ranks each make the name up and share it
    assert not plan_run(parse_run_args([QUICKSTART])).claim


def test_trim_drops_the_rows_after_the_checkpoint_and_a_cut_row(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train_loss\n0,0,1.0\n1,1,0.9\n,1,\n2,2,0.8\n3,3")
    assert trim_metrics(path, 2) == 2
    assert path.read_text() == "epoch,step,train_loss\n0,0,1.0\n1,1,0.9\n,1,\n"


# -- in other processes: kill -9, and a rank lost under torchrun ------------------------------------

def _wait_for_checkpoint(proc: subprocess.Popen, path: Path, epochs: int, timeout: float = 120.0) -> None:
    """Wait (bounded) until ``path`` covers ``epochs`` epochs; fail if the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before {path} covered {epochs} epochs"
        if path.is_file() and epochs_done(path) == epochs:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not cover {epochs} epochs within {timeout:.0f} s")


def _gnnkit(args: list[str], env: dict[str, str], log: Path, timeout: float = 300) -> None:
    with open(log, "w") as out:
        rc = subprocess.run([sys.executable, "-m", "gnnkit.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **env}, timeout=timeout).returncode
    assert rc == 0, log.read_text()[-3000:]


def _killed_in_epoch(epoch: int, run_dir: Path, log: Path) -> int:
    """Run quickstart into ``run_dir`` in another process, stalled at the first batch of ``epoch``
    (its ``last.ckpt`` then covers the epochs before), kill it with SIGKILL; its return code."""
    env = {**os.environ, "GNNKIT_NATIVE": "0", FAULT_ENV: f"stall@{epoch}"}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gnnkit.cli", "run", QUICKSTART, "--trainer.max_epochs",
                                 str(EPOCHS), "--run_dir", str(run_dir)], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_for_checkpoint(proc, run_dir / "checkpoints" / "last.ckpt", epoch)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return proc.returncode


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_with_the_same_losses(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run(QUICKSTART, ["--trainer.max_epochs", str(EPOCHS), "--run_dir", str(straight)])
    assert _killed_in_epoch(2, killed, tmp_path / "killed.log") == -signal.SIGKILL
    _gnnkit(["run", "--resume", str(killed)], {"GNNKIT_NATIVE": "0"}, tmp_path / "resumed.log")
    assert "exists and is not empty" not in (tmp_path / "resumed.log").read_text()  # resuming there is the point
    torch.testing.assert_close(losses(killed), losses(straight), rtol=1e-5, atol=1e-6)
    assert json.loads((killed / "report.json").read_text())["epochs"] == EPOCHS


@pytest.mark.slow
def test_a_run_killed_in_training_leaves_nothing_set_aside(tmp_path):
    """A run into an earlier run's folder set its files aside until it had finished testing, so one
    killed mid-training left a hidden copy of them there (gnnkit.set_aside)."""
    used = tmp_path / "used"
    run(QUICKSTART, ["--trainer.max_epochs", "2", "--run_dir", str(used)])  # its last.ckpt covers 2 epochs
    assert _killed_in_epoch(1, used, tmp_path / "killed.log") == -signal.SIGKILL
    assert [p.name for p in used.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
def test_a_sigterm_to_the_process_group_with_loader_workers_is_one_line(tmp_path):
    """`timeout`, `docker stop` and schedulers signal the whole group: the loader's workers died of
    it first, and torch's "DataLoader worker ... is killed by signal: Terminated" came out as a
    traceback with status 1."""
    run_dir = tmp_path / "r"
    with open(tmp_path / "run.log", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gnnkit.cli", "run", QUICKSTART, *SAMPLED,
                                 "--data.num_workers", "2", "--trainer.max_epochs", "1000", "--run_dir", str(run_dir)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "GNNKIT_NATIVE": "0"},
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while not (run_dir / "checkpoints" / "last.ckpt").is_file() and time.monotonic() < deadline:
                assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
                time.sleep(0.2)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    log = (tmp_path / "run.log").read_text()
    assert proc.returncode == 128 + signal.SIGTERM, log[-3000:]
    assert log.splitlines()[-1] == f"gnnkit: stopped by SIGTERM (gnnkit run --resume {run_dir} continues it)"
    assert "Traceback" not in log and "Received SIGTERM" not in log


TWO_RANKS = [*SAMPLED, "--trainer.devices", "2", "--trainer.strategy.class_path", "gnnkit.comm.GnnkitStrategy",
             "--trainer.strategy.init_args.warmup_steps", "1"]
SIGNUM = ["--trainer.strategy.init_args.comm", "signsgd", "--trainer.strategy.init_args.sign_momentum", "0.9",
          "--trainer.strategy.init_args.sign_error_feedback", "true"]
TOPK = ["--trainer.strategy.init_args.comm", "topk_a2a", "--trainer.strategy.init_args.density", "0.05"]


def _torchrun(run_dir: Path, log: Path, env: dict[str, str], mode: list[str] = SIGNUM) -> None:
    args = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1", "--standalone",
            "-m", "gnnkit.cli", "run", QUICKSTART, *TWO_RANKS, *mode, "--trainer.max_epochs", str(EPOCHS),
            "--run_dir", str(run_dir)]
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE: a restarted worker group otherwise can read the previous
    # group's addresses from torchrun's store (pytorch/pytorch#135712) and fail to connect
    env = {**os.environ, "GNNKIT_NATIVE": "0", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **env}
    with open(log, "w") as out:
        rc = subprocess.run([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                            timeout=300).returncode
    assert rc == 0, log.read_text()[-4000:]


@pytest.mark.slow
def test_torchrun_restarts_a_lost_rank_and_resumes_from_last_ckpt(tmp_path):
    """Rank 1 exits in epoch 1 on the first attempt; torchrun --max-restarts 1 starts both ranks
    again, they resume from last.ckpt by themselves (sampler, random, signSGD momentum and residual state
    of each rank) and finish with the uninterrupted run's losses."""
    straight, restarted = tmp_path / "straight", tmp_path / "restarted"
    _torchrun(straight, tmp_path / "straight.log", {})
    _torchrun(restarted, tmp_path / "restarted.log", {FAULT_ENV: "exit@1:1"})
    log = (tmp_path / "restarted.log").read_text()
    assert f"failed (exitcode: {EXIT_CODE})" in log and "torchrun restart 1" in log, log[-3000:]
    torch.testing.assert_close(losses(restarted), losses(straight), rtol=1e-5, atol=1e-6)
    ckpt = torch.load(restarted / "checkpoints" / "last.ckpt", weights_only=True)
    momenta = [r["hook"]["communicator"]["velocity"] for r in ckpt["gnnkit_comm"]["ranks"]]
    assert len(momenta) == 2 and momenta[0] and momenta[0].keys() == momenta[1].keys()
    residuals = [r["hook"]["communicator"]["residuals"] for r in ckpt["gnnkit_comm"]["ranks"]]
    assert residuals[0] and residuals[0].keys() == momenta[0].keys()


def test_help_documents_resume_and_ckpt_path(capsys):
    from gnnkit.run import RUN_HELP

    with pytest.raises(SystemExit) as exit_:
        run("--help", [])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--resume RUN_DIR" in out and "--ckpt_path CKPT" in out and "--trainer.max_epochs" in out
    assert out.startswith("usage: gnnkit run ")  # not "gnnkit", the console script's name
    assert "--resume" in RUN_HELP and "torchrun" in RUN_HELP
    readme = (REPO / "README.md").read_text()
    assert "gnnkit run --resume" in readme and "--ckpt_path" in readme


@pytest.mark.slow
def test_torchrun_restart_of_a_top_k_run_takes_the_same_steps(tmp_path):
    """topk_a2a picks the largest entries of each DDP bucket: the strategy keeps DDP's first
    bucket grouping (fixed_buckets), so the restarted run, whose DDP is new, groups as the
    uninterrupted run did and resumes with its losses and residuals."""
    straight, restarted = tmp_path / "straight", tmp_path / "restarted"
    _torchrun(straight, tmp_path / "straight.log", {}, TOPK)
    _torchrun(restarted, tmp_path / "restarted.log", {FAULT_ENV: "exit@1:1"}, TOPK)
    assert "torchrun restart 1" in (tmp_path / "restarted.log").read_text()
    torch.testing.assert_close(losses(restarted), losses(straight), rtol=1e-5, atol=1e-6)


def test_a_fresh_run_in_a_used_folder_replaces_the_earlier_runs_checkpoints(tmp_path, monkeypatch):
    """Lightning wrote best-v1.ckpt beside the earlier run's best.ckpt, which --ckpt_path best and a
    later --resume then took; a checkpoint the new run starts from, and a folder that held no run,
    keep theirs."""
    from gnnkit.resume import prepare_metrics

    def prepare_metrics_and_train(args: list[str]) -> None:
        plan = plan_run(parse_run_args(args))
        aside = SetAside(plan.run_dir)
        prepare_metrics(plan, aside)
        aside.drop()  # what a run that trains does

    monkeypatch.chdir(tmp_path)
    used = tmp_path / "used"
    (used / "checkpoints").mkdir(parents=True)
    (used / "config.yaml").write_text("model: {}\n")
    for name in ("best.ckpt", "best-v1.ckpt", "last.ckpt", "start.ckpt"):
        _torch_file(used / "checkpoints" / name, {"state_dict": {}, "optimizer_states": []})  # what the plan checks
    prepare_metrics_and_train([QUICKSTART, "--run_dir", str(used),
                               "--ckpt_path", str(used / "checkpoints" / "start.ckpt")])
    assert [p.name for p in (used / "checkpoints").iterdir()] == ["start.ckpt"]
    (used / "checkpoints" / "best.ckpt").write_text("")  # a killed attempt's, saved before its first last.ckpt
    prepare_metrics_and_train(["--resume", str(used)])
    assert [p.name for p in (used / "checkpoints").iterdir()] == []
    assert sorted(p.name for p in used.iterdir()) == ["checkpoints", "config.yaml"]  # nothing set aside is left
    mine = tmp_path / "mine"
    (mine / "checkpoints").mkdir(parents=True)
    (mine / "checkpoints" / "model.ckpt").write_text("")
    prepare_metrics_and_train([QUICKSTART, "--run_dir", str(mine)])
    assert (mine / "checkpoints" / "model.ckpt").is_file()


def test_a_rerun_of_a_runs_config_is_named_after_its_recipe(tmp_path):
    """`gnnkit run runs/quickstart-<time>/config.yaml` made runs/config-<time>."""
    from gnnkit.resume import recipe_name

    assert recipe_name("recipes/quickstart.yaml") == "quickstart" and recipe_name(None) == "run"
    assert recipe_name(tmp_path / "quickstart-20261128-134917" / "config.yaml") == "quickstart"
    assert recipe_name(tmp_path / "gcn_arxiv-20261128-134917-2" / "config.yaml") == "gcn_arxiv"
    assert recipe_name(tmp_path / "mine" / "config.yaml") == "config"


def test_a_moved_run_folder_resumes_with_its_best_checkpoint(tmp_path, monkeypatch):
    """Lightning reloaded only the best path after the folder moved, not its score: the next
    validation counted as best, and the test took other weights than the uninterrupted run's."""
    import shutil

    straight = tmp_path / "straight"
    run(QUICKSTART, ["--trainer.max_epochs", "4", "--run_dir", str(straight)])
    killed = tmp_path / "killed"
    monkeypatch.setenv(FAULT_ENV, "raise@3")
    with pytest.raises(InjectedFault):
        run(QUICKSTART, ["--trainer.max_epochs", "4", "--run_dir", str(killed)])
    monkeypatch.delenv(FAULT_ENV)
    moved = tmp_path / "moved"
    shutil.move(killed, moved)
    report = run("--resume", [str(moved)])
    want = json.loads((straight / "report.json").read_text())
    assert (report["val"], report["test"]) == (want["val"], want["test"])
    assert report["best_checkpoint"] == str(moved.resolve() / "checkpoints" / "best.ckpt")


def test_best_checkpoint_paths_follow_the_folder():
    from gnnkit.best_checkpoint import moved

    state = {"dirpath": "/a/ck", "best_model_path": "/a/ck/best.ckpt", "best_model_score": 0.7,
             "best_k_models": {"/a/ck/best.ckpt": 0.7}, "last_model_path": ""}
    assert moved(state, "/a/ck", "/b/ck") == {"dirpath": "/b/ck", "best_model_path": "/b/ck/best.ckpt",
                                              "best_model_score": 0.7, "best_k_models": {"/b/ck/best.ckpt": 0.7},
                                              "last_model_path": ""}


def test_a_new_run_from_another_runs_checkpoint_tracks_its_own_best(recwarn):
    """Lightning kept the other run's best path (with a "dirpath has changed" warning), so the new
    run's test could take the other run's weights."""
    from gnnkit.best_checkpoint import BestCheckpoint

    state = {"dirpath": "/a/ck", "best_model_path": "/a/ck/best.ckpt", "best_model_score": torch.tensor(0.7),
             "best_k_models": {"/a/ck/best.ckpt": torch.tensor(0.7)}, "last_model_path": ""}
    new = BestCheckpoint(dirpath="/b/ck", filename="best", monitor="val_metric", mode="max")
    new.load_state_dict(dict(state))
    assert new.best_model_path == "" and new.best_model_score is None and not recwarn.list
    resumed = BestCheckpoint(dirpath="/b/ck", filename="best", monitor="val_metric", mode="max", resumed=True)
    resumed.load_state_dict(dict(state))
    assert resumed.best_model_path == "/b/ck/best.ckpt" and float(resumed.best_model_score) == pytest.approx(0.7)


def test_a_refused_run_request_is_told_before_torch_or_lightning_loads(tmp_path):
    """`gnnkit run --resume nowhere` took 7 s (11 s on a loaded machine) to print one line."""
    probe = ("import sys; from gnnkit.cli import main; code = main(['run', '--resume', 'nowhere']); "
             "print(code, 'lightning.pytorch' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.stdout.split() == ["2", "False", "False"], out.stderr
    assert out.stderr.strip() == "gnnkit: error: gnnkit run --resume nowhere: no config.yaml there (expected a run " \
                                 "folder written by `gnnkit run`)"


def test_a_resume_on_a_changed_dataset_is_refused(tmp_path, monkeypatch, make_ogb_folder):
    """A dataset folder whose edges were cut after the run resumed without a word: the report gave
    the new graph's edges, the best score came from the old graph."""
    import shutil

    from tests.conftest import graph_arrays
    from pipeline.ogb_layout import write_ogb_folder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "home"))
    folder = make_ogb_folder()
    run_dir = tmp_path / "r"
    run(QUICKSTART, ["--data.dataset", str(folder), "--trainer.max_epochs", "2", "--run_dir", str(run_dir)])
    report = run("--resume", [str(run_dir), "--trainer.max_epochs", "3"])  # the same folder: it continues
    assert report["epochs"] == 3
    parts = graph_arrays()
    parts["edge_index"] = parts["edge_index"][:, :600]
    shutil.rmtree(folder)
    write_ogb_folder(folder, **parts)
    with pytest.raises(ResumeError, match=rf"^gnnkit run --resume {run_dir}: its dataset changed since the "
                                          r"checkpoint was written \(cache entry \w{12}, now \w{12};"):
        run("--resume", [str(run_dir), "--trainer.max_epochs", "4"])
