"""End to end: `gnnkit run` on recipes, as a user would type it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"


def _gnnkit(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "gnnkit.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=600, env=None if env is None else {**os.environ, **env})


#: For runs whose point is not the native kernels (a fresh GNNKIT_HOME would build them first).
NATIVE_OFF = {"GNNKIT_NATIVE": "0"}


@pytest.mark.slow
def test_quickstart_writes_a_complete_run_folder(tmp_path):
    out = _gnnkit("run", QUICKSTART, "--trainer.max_epochs", "15", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    run_dir = tmp_path / lines[-1]
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.startswith("quickstart-")
    assert lines[-2].startswith("test acc: ")
    for noise in ("GPU available", "TPU available", "litlogger", "LeafSpec", "weights_only", "round-trip"):  # gnnkit.quiet
        assert noise not in out.stderr, noise
    assert re.search(r"\.py:\d+: ", out.stderr) is None, out.stderr  # no warning at all (path:line: message)
    for name in ("config.yaml", "metrics.csv", "curves.png", "report.json", "checkpoints/best.ckpt"):
        assert (run_dir / name).is_file(), name
    report = json.loads((run_dir / "report.json").read_text())
    for key in ("dataset", "model", "metric", "val", "test", "epochs", "epoch_time_s", "peak_rss_mb", "num_params"):
        assert report[key] is not None, key
    assert report["dataset"] == "synthetic-tiny" and report["metric"] == "acc" and report["epochs"] == 15
    assert report["test"] > 0.5
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["trainer"]["max_epochs"] == 15 and config["data"]["dataset"] == "synthetic-tiny"
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_recipe_typo_gets_lightningclis_error(tmp_path):
    out = _gnnkit("run", QUICKSTART, "--model.hiden_channels", "8", "--run_dir", tmp_path / "r", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == ("gnnkit: error: unrecognized arguments: --model.hiden_channels 8; did you "
                                           "mean --model.hidden_channels? (gnnkit run RECIPE --help lists the settings)")
    assert "usage:" not in out.stderr  # not the 80 lines of every setting ahead of it


@pytest.mark.parametrize("argv,line", [
    (["--trainer.max_epoch", "3"], "unrecognized arguments: --trainer.max_epoch 3; did you mean --trainer.max_epochs?"),
    (["--trainer.max_epochs", "abc"], "trainer.max_epochs: expected int or None, got 'abc'"),
    (["--model.lr", "x"], "model.lr: expected float, got 'x'"),
    (["--trainer.precision", "13"], "trainer.precision: expected one of 64, 32, 16, transformer-engine, "
                                    "transformer-engine-float16, 16-true, 16-mixed, bf16-true, bf16-mixed, 32-true, "
                                    "64-true, bf16 or None, got '13'"),
    (["--lr_scheduler", "StepLR", "--trainer.max_epochs", "1"],  # --print_config would not check it: it runs
     "lr_scheduler: torch.optim.lr_scheduler.StepLR needs step_size (--lr_scheduler.step_size VALUE)"),
    (["--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "x"], "lr_scheduler.step_size: expected int, got 'x'"),
], ids=["an abbreviation (it set max_epochs)", "a union type (jsonargparse's 5-part dump)", "one type",
        "literals (it said 'expected , got')", "a class without a required argument", "a class's argument"])
def test_a_misspelt_or_mistyped_setting_is_one_plain_line(argv, line, tmp_path, monkeypatch, capsys):
    from gnnkit.run import run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        run(str(QUICKSTART), [*argv, *["--print_config"] * ("--trainer.max_epochs" not in argv)])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"gnnkit: error: {line} (gnnkit run RECIPE --help lists the settings)"


def test_help_of_a_recipe_shows_its_values_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """It showed the classes' defaults (hidden_channels 256 where the recipe says 64)."""
    from gnnkit.run import run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        run(str(QUICKSTART), ["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "Note: default values below are the ones overridden by the contents of" in out
    hidden = out[out.index("--model.hidden_channels HIDDEN_CHANNELS\n"):].split("--model.num_layers")[0]
    assert "default: 64)" in " ".join(hidden.split())
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_print_config_and_bad_arguments_write_no_run_folder(tmp_path):
    out = _gnnkit("run", QUICKSTART, "--trainer.max_epochs", "2", "--print_config", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert yaml.safe_load(out.stdout)["trainer"]["max_epochs"] == 2
    out = _gnnkit("run", QUICKSTART, "--model.hiden_channels", "8", cwd=tmp_path)
    assert out.returncode != 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_unknown_dataset_in_recipe_is_one_clear_line(tmp_path):
    out = _gnnkit("run", QUICKSTART, "--data.dataset", "synthetic-tinny", "--run_dir", tmp_path / "r", cwd=tmp_path)
    assert out.returncode == 2
    assert "gnnkit: error: dataset: unknown dataset 'synthetic-tinny'; did you mean 'synthetic-tiny'?" in out.stderr


@pytest.mark.slow
def test_a_users_ogb_folder_trains_with_only_the_dataset_changed(tmp_path, make_ogb_folder):
    folder = make_ogb_folder()
    recipe = yaml.safe_load(QUICKSTART.read_text())
    recipe["data"]["dataset"] = str(folder)
    recipe["trainer"]["max_epochs"] = 3
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = _gnnkit("run", path, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / out.stdout.strip().splitlines()[-1] / "report.json").read_text())
    assert report["dataset"] == folder.name and report["data"]["num_nodes"] == 200
    # The recipe states `undirected: true`, so the folder (directed by default) is symmetrised too,
    # and report.json and the log say so.
    data = report["data"]
    assert (data["graph"], data["self_loops"], data["normalize_features"]) == ("symmetrised", "keep", "none")
    assert data["raw_edges"] == 1000 and 1000 < data["num_edges"] <= 2000
    assert f"data {folder.name}: symmetrised graph, 1,000 -> {data['num_edges']:,} edges" in out.stderr


def test_every_recipe_parses_with_lightningcli(tmp_path):
    """Each shipped recipe is a valid LightningCLI config (checked without building the dataset)."""
    import torch
    from lightning.pytorch.cli import LightningArgumentParser, LRSchedulerTypeTuple

    from gnnkit.hints import add_reference_argument
    from gnnkit.tasks import add_task_argument, recipe_task, task_family

    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        module, datamodule = task_family(recipe_task(recipe, [])).classes()
        parser = LightningArgumentParser(exit_on_error=False)
        parser.add_lightning_class_args(module, "model")
        parser.add_lightning_class_args(datamodule, "data")
        add_task_argument(parser)
        parser.add_class_arguments(__import__("lightning").pytorch.Trainer, "trainer")
        parser.add_argument("--seed_everything", type=int)
        parser.add_optimizer_args((torch.optim.Optimizer,))  # LightningCLI's optimizer: / lr_scheduler:
        parser.add_lr_scheduler_args(LRSchedulerTypeTuple)
        add_reference_argument(parser)
        config = parser.parse_path(str(recipe))
        assert config.data.dataset, recipe.name


def test_every_recipe_states_which_graph_it_trains():
    """Every node recipe says `undirected: true`, so a folder given with --data.dataset is symmetrised as
    the registry datasets are (their entries symmetrise too: the option, hence the cache key, is the same)."""
    from gnnkit.tasks import recipe_task

    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        if recipe_task(recipe, []) != "node":
            continue  # graph-property batches are whole molecules, stored with both edge directions
        assert yaml.safe_load(recipe.read_text())["data"].get("undirected") is True, recipe.name


@pytest.mark.parametrize("recipe", ["gcn_citation.yaml", "gat_citation.yaml"])
def test_citation_recipes_run_as_shipped(tmp_path, recipe):
    """A couple of epochs on their default graph (synthetic-tiny, Cora-sized: no hint); the run
    folder records the reference graph and the symmetrised graph, its signed features kept as stored
    (``normalize_features: auto``; row normalisation gave GCN 0.28 test accuracy there, not 0.78)."""
    out = _gnnkit("run", REPO / "recipes" / recipe, "--trainer.max_epochs", "2", "--run_dir", tmp_path / "r",
                  cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-2].startswith("test acc: ") and "hint:" not in out.stderr
    reference = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["reference"]
    assert reference == {"graph": "Cora", "nodes": 2708, "heterophilous": False}
    data = json.loads((tmp_path / "r" / "report.json").read_text())["data"]
    assert (data["graph"], data["normalize_features"], data["preprocess"]["normalize_features"]) == \
        ("symmetrised", "none", "auto")


def test_a_graph_imported_for_link_prediction_trains_with_the_recipe_its_line_names(tmp_path):
    """`gnnkit import --task link` names the GAE recipe for a Cora-sized graph, and that line runs:
    a graph of eight communities, whose held-out links a GCN scores well above chance."""
    rng = np.random.default_rng(0)
    n = 400
    side = np.arange(n) % 8
    pairs = rng.integers(0, n, (20000, 2))
    pairs = pairs[(side[pairs[:, 0]] == side[pairs[:, 1]]) | (rng.random(len(pairs)) < 0.005)][:1500]
    x = np.eye(8, dtype=np.float32)[side] + rng.normal(0, 1, (n, 8)).astype(np.float32)
    np.savez(tmp_path / "g.npz", edge_index=np.concatenate([pairs.T, pairs.T[::-1]], 1), x=x)
    out = _gnnkit("import", "g.npz", "mine", "--task", "link", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    line = out.stdout.splitlines()[1]
    assert line.startswith(f"train it: gnnkit run {REPO / 'recipes' / 'gae_citation.yaml'} --data.dataset mine ")
    run = line.removeprefix("train it: gnnkit ").split("   ")[0].split()
    out = _gnnkit(*run, "--trainer.max_epochs", "30", "--run_dir", tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["metric"] == "rocauc" and report["test"] > 0.8, report


def test_a_graph_dataset_imported_for_graph_prediction_trains_with_the_recipe_its_line_names(tmp_path):
    """`gnnkit import --task graph` on a list of PyG graphs (paths and stars) names the GIN recipe
    set for the TU datasets, and that line runs."""
    import torch

    graphs = []
    for i in range(60):
        n = 5 + i % 7
        hub = torch.zeros(n - 1, dtype=torch.long) if i % 2 else torch.arange(n - 1)
        edges = torch.stack([hub, torch.arange(1, n)])
        graphs.append({"edge_index": torch.cat([edges, edges.flip(0)], 1), "x": torch.ones(n, 1),
                       "y": torch.tensor([i % 2])})
    torch.save(graphs, tmp_path / "graphs.pt")
    out = _gnnkit("import", "graphs.pt", "shapes", "--task", "graph", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("shapes: 60 graphs, 474 nodes, 828 edges, 1 node feature,")
    line = out.stdout.splitlines()[1]
    assert line == f"train it: gnnkit run {REPO / 'recipes' / 'gin_tu.yaml'} --data.dataset shapes"
    out = _gnnkit(*line.removeprefix("train it: gnnkit ").split(), "--trainer.max_epochs", "3", "--run_dir",
                  tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["metric"] == "acc" and report["dataset"] == "shapes"


@pytest.mark.slow
def test_a_graph_far_smaller_than_the_recipes_reference_gets_a_hint(tmp_path):
    out = _gnnkit("run", REPO / "recipes" / "gcn_arxiv.yaml", "--data.dataset", "synthetic-tiny", "--trainer.max_epochs",
                  "1", "--model.hidden_channels", "8", "--run_dir", tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ("[gnnkit] hint: synthetic-tiny has 3,000 nodes, 56x fewer than ogbn-arxiv (169,343), the graph gcn_arxiv.yaml's "
            f"hyper-parameters come from; {REPO / 'recipes' / 'gcn_citation.yaml'} is set for Cora (2,708 nodes)\n"
            in out.stderr), out.stderr[-3000:]


@pytest.mark.slow
def test_a_heterophilous_graph_under_a_citation_recipe_gets_a_hint_and_its_homophily_is_reported(
        tmp_path, make_ogb_folder):
    """Random edges and labels: adjusted homophily about 0, far below Cora's; the hint names the
    heterophily recipe, and report.json holds the measure."""
    from tests.conftest import graph_arrays

    folder = make_ogb_folder(**graph_arrays(num_nodes=1000, num_edges=6000))  # 2,160 edges between training nodes
    out = _gnnkit("run", REPO / "recipes" / "gcn_citation.yaml", "--data.dataset", folder, "--trainer.max_epochs", "1",
                  "--run_dir", tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    homophily = json.loads((tmp_path / "r" / "report.json").read_text())["data"]["adjusted_homophily"]
    assert abs(homophily) < 0.2
    assert (f"is heterophilous (adjusted homophily {round(homophily, 2) + 0.0:.2f} on its training labels, below 0.3), "
            f"unlike Cora, the graph gcn_citation.yaml's hyper-parameters come from; compare "
            f"{REPO / 'recipes' / 'sage_heterophilous.yaml'} by validation" in out.stderr), out.stderr[-3000:]


def test_a_batch_limit_of_1_is_one_batch_and_a_written_float_a_fraction(tmp_path):
    """`--trainer.limit_val_batches 1` is the int 1 (one batch), in the trainer and in config.yaml,
    from the command line and from a recipe; jsonargparse had widened it to 1.0 (every batch)."""
    from gnnkit.run import GnnkitCLI

    recipe = tmp_path / "recipe.yaml"
    config = yaml.safe_load(QUICKSTART.read_text())
    config["trainer"]["limit_predict_batches"] = 1
    recipe.write_text(yaml.safe_dump(config))
    cli = GnnkitCLI(tmp_path / "run", ["--config", str(recipe), "--trainer.limit_val_batches", "1",
                                       "--trainer.limit_train_batches", "20", "--trainer.limit_test_batches", "1.0"])
    trainer = cli.trainer
    assert (trainer.limit_val_batches, trainer.limit_train_batches) == (1, 20)
    assert type(trainer.limit_val_batches) is int and type(trainer.limit_predict_batches) is int
    assert type(trainer.limit_test_batches) is float  # 1.0: all of them, as written
    saved = cli.config["trainer"]
    assert (saved["limit_val_batches"], saved["limit_predict_batches"]) == (1, 1)
    assert type(saved["limit_val_batches"]) is int and type(saved["limit_train_batches"]) is int


@pytest.mark.slow
def test_a_run_without_validation_says_so_once_and_tests_the_last_weights(tmp_path):
    """`--trainer.limit_val_batches 0`: one log line instead of Lightning's warning that the
    best checkpoint's metric was never logged (with a hint to call `log('val_metric', ...)`)."""
    out = _gnnkit("run", QUICKSTART, "--trainer.max_epochs", "2", "--trainer.limit_val_batches", "0",
                  "--run_dir", tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "could not find the monitored key" not in out.stderr
    assert out.stderr.count("validation off (limit_val_batches 0)") == 1
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["val"] is None and report["test"] is not None
    assert out.stdout.splitlines()[-2] == f"test acc: {report['test']:.4f}"
    assert not (tmp_path / "r" / "checkpoints" / "best.ckpt").exists()


@pytest.mark.parametrize(("setting", "line"), [
    (["--model.dropout", "3"], "model.dropout: expected a probability in [0, 1), got 3.0"),  # gnnkit's check
    (["--model.lr", "-1"], "model.lr: expected a finite number > 0, got -1.0"),  # torch's optimizer: inside fit
    (["--data.batch_size", "64", "--data.num_neighbors", "[-3, 5]"],
     "data.num_neighbors: expected a list of at least one fan-out per layer, each >= 0 or -1"),  # PyG's: inside fit
    (["--data.sampler_device", "tpu"], "data.sampler_device: expected one of ['auto', 'cpu', 'cuda'], got 'tpu'"),
    (["--trainer.max_epochs", "-5"], "`max_epochs` must be a non-negative integer or -1. You passed in -5."),
    (["--trainer.accelerator", "gpu"], "trainer.accelerator: gpu cannot be used here: it needs a GPU (torch "),
    (["--trainer.accelerator", "cuda"], "trainer.accelerator: cuda cannot be used here: it needs a GPU (torch "),
    (["--trainer.strategy", "ddp_spawn", "--trainer.devices", "2", "--trainer.accelerator", "cpu"],
     "trainer.strategy: ddp_spawn starts its ranks with multiprocessing ('spawn'), and their epoch times"),
    (["--trainer.strategy.class_path", "lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.init_args."
      "start_method", "fork", "--trainer.devices", "2", "--trainer.accelerator", "cpu"],
     "trainer.strategy: DDPStrategy(start_method='fork') starts its ranks with multiprocessing ('fork')"),
    (["--trainer.accelerator", "xyz"], "You selected an invalid accelerator name: `accelerator='xyz'`. Available "
     "names are: auto, "),  # Lightning's, as it is: no word of a GPU added
], ids=["model", "lr", "fanouts", "data", "trainer", "no-gpu", "no-cuda", "ddp_spawn", "fork", "unknown"])
def test_a_setting_the_classes_refuse_is_one_line_and_leaves_no_run_folder(tmp_path, monkeypatch, setting, line):
    import torch

    from gnnkit.resume import ResumeError
    from gnnkit.run import run

    if setting[-1] in ("gpu", "cuda") and torch.cuda.is_available():
        pytest.skip("a GPU is there: the accelerator is not refused")
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    with pytest.raises(ResumeError) as refused:
        run(str(QUICKSTART), [*setting, "--run_dir", str(tmp_path / "r")])
    assert str(refused.value).startswith(line) and "\n" not in str(refused.value)
    if setting[-1] in ("gpu", "cuda"):  # what this torch sees, for either spelling
        assert f"(torch {torch.__version__}, " in str(refused.value)
        assert str(refused.value).endswith("sees none); expected one this machine has: cpu (or auto)")
    if setting[-1] == "xyz":  # Lightning lists cuda among the names: no note that this torch sees no GPU
        assert "GPU" not in str(refused.value)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("name", "needs"), [
    ("tpu", "torch_xla>=1.13 (not installed)"),  # Lightning's ModuleNotFoundError traceback, exit 1
    ("mps", "an Apple silicon GPU (torch's MPS backend is not available here)"),
    ("hpu", "the lightning-habana package (not installed) and an Intel Gaudi device"),
])
def test_an_accelerator_lightning_cannot_use_here_is_one_line_before_the_data_is_read(tmp_path, monkeypatch,
                                                                                       name, needs):
    import importlib.util

    from lightning.pytorch.accelerators import AcceleratorRegistry

    from gnnkit.resume import ResumeError
    from gnnkit.run import run

    if name in AcceleratorRegistry and AcceleratorRegistry[name]["accelerator"].is_available():
        pytest.skip(f"{name} can be used here")
    if name == "tpu" and importlib.util.find_spec("torch_xla") is not None:
        needs = "a TPU (torch_xla sees none)"
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "home"))  # an empty cache: building would preprocess
    with pytest.raises(ResumeError) as refused:
        run(str(QUICKSTART), ["--trainer.accelerator", name, "--run_dir", str(tmp_path / "r")])
    assert str(refused.value).startswith(f"trainer.accelerator: {name} cannot be used here: it needs {needs}; "
                                         "expected one this machine has: cpu")
    assert not (tmp_path / "home" / "cache").exists() and not (tmp_path / "r").exists()


def test_requests_refused_before_the_run_are_one_line_exit_2_and_leave_no_folder(tmp_path):
    """A text file as --ckpt_path (`IndexError: pop from empty list` from torch's unpickler, inside
    fit) and a run folder under a file (`NotADirectoryError` from mkdir, once the data was read)."""
    (tmp_path / "some.txt").write_text("some text\n")
    for args, line in [
        (["--ckpt_path", "some.txt"], "gnnkit: error: gnnkit run --ckpt_path some.txt: not a checkpoint (not a zip "
                                      "file; expected a Lightning checkpoint, a torch zip file such as a run's "
                                      "checkpoints/last.ckpt)"),
        (["--run_dir", "some.txt/sub"], "gnnkit: error: gnnkit run: the run folder some.txt/sub is under some.txt, "
                                        "which is a file, not a folder (expected a folder, or a path to make one)"),
    ]:
        out = _gnnkit("run", QUICKSTART, *args, cwd=tmp_path, env=NATIVE_OFF)
        assert (out.returncode, out.stderr.strip()) == (2, line)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["some.txt"]


@pytest.mark.slow
def test_a_bfloat16_model_trains_on_bfloat16_batches(tmp_path):
    """`--trainer.precision bf16-true` puts the weights in bfloat16; the PyG batch's features follow
    (they stayed float32: `mat1 and mat2 must have the same dtype`)."""
    out = _gnnkit("run", QUICKSTART, "--trainer.max_epochs", "10", "--trainer.precision", "bf16-true",
                  "--model.aggregation", "gnnkit", "--run_dir", tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((tmp_path / "r" / "report.json").read_text())["test"] > 0.5


@pytest.mark.slow
def test_a_run_without_checkpointing_writes_none_and_reports_the_last_epochs_validation(tmp_path):
    """`--trainer.enable_checkpointing false` (Lightning refused gnnkit's ModelCheckpoint: one error
    line): no checkpoint is written, the test takes the last weights and reports their validation."""
    out = _gnnkit("run", QUICKSTART, "--trainer.max_epochs", "3", "--trainer.enable_checkpointing", "false",
                  "--run_dir", tmp_path / "r", cwd=tmp_path, env=NATIVE_OFF)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("checkpointing off (enable_checkpointing false)") == 1
    assert not (tmp_path / "r" / "checkpoints").exists()
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    last_val = float(out.stderr.split("epoch 3/3 ")[1].split("val_metric=")[1].split()[0])
    assert report["best_checkpoint"] is None and report["val"] == pytest.approx(last_val, abs=1e-4)


def test_a_bad_model_setting_is_refused_before_the_data_is_read(tmp_path, monkeypatch, gnnkit_log):
    """The datamodule reads (on first use preprocesses) the dataset when built: `--model.dropout 3`
    waited for that, minutes on products, before its one-line error. Into an earlier run's folder,
    that error came after a line saying the run would replace the earlier one (it leaves it)."""
    from gnnkit.resume import ResumeError
    from gnnkit.run import run

    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "home"))  # an empty cache: building would preprocess
    with pytest.raises(ResumeError, match=r"^model\.dropout: expected a probability in \[0, 1\), got 3\.0$"):
        run(str(QUICKSTART), ["--model.dropout", "3", "--run_dir", str(tmp_path / "r")])
    with pytest.raises(ResumeError, match=r"^model\.format: Could not resolve format 'sell' among choices \["):
        run(str(QUICKSTART), ["--model.format", "sell", "--run_dir", str(tmp_path / "r")])
    assert not (tmp_path / "home" / "cache").exists() and not (tmp_path / "r").exists()
    run(str(QUICKSTART), ["--trainer.max_epochs", "1", "--run_dir", str(tmp_path / "r")])
    assert (tmp_path / "home" / "cache").is_dir()  # what a good setting builds
    gnnkit_log.clear()
    with pytest.raises(ResumeError, match=r"^model\.dropout: "):
        run(str(QUICKSTART), ["--model.dropout", "3", "--run_dir", str(tmp_path / "r")])
    assert "earlier run" not in gnnkit_log.text


@pytest.mark.parametrize("recipe", sorted(p.name for p in (QUICKSTART.parent).glob("*.yaml")))
def test_every_recipe_s_model_settings_pass_the_early_check(recipe):
    """The early check has only the recipe's model section, not the datamodule's shapes: it must
    refuse none of the shipped recipes (each trains in its own tests)."""
    import yaml

    from gnnkit.tasks import DEFAULT_TASK, task_family

    config = yaml.safe_load((QUICKSTART.parent / recipe).read_text())
    module, _ = task_family(config.get("task", DEFAULT_TASK)).classes()
    settings = module.check_settings(config.get("model") or {})
    assert settings["lr"] > 0


def test_a_setting_refused_in_setup_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch):
    """model.tt_reorder on a dataset without a node order is found in the module's setup, once the
    data is read: it was a 41-line traceback, exit 1, with the run folder holding config.yaml."""
    from gnnkit.resume import ResumeError
    from gnnkit.run import run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ResumeError, match=r"^model\.tt_reorder: the dataset has no node order"):
        run(str(QUICKSTART.parent / "tt_synthetic_arxiv.yaml"),
            ["--data.dataset", "synthetic-tiny", "--data.reorder", "none", "--trainer.max_epochs", "1",
             "--run_dir", str(tmp_path / "runs" / "t")])
    assert not (tmp_path / "runs").exists()
