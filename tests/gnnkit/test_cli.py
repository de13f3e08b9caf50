import argparse
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnkit.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_datasets_lists_the_registry(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "ogbn-products" in out and "synthetic-arxiv" in out and "cache:" in out
    assert out.splitlines()[0].split()[:3] == ["name", "task", "source"]
    assert any(line.split()[:3] == ["ogbn-arxiv", "node", "ogb"] for line in out.splitlines())


def test_preprocess_then_hit_then_verify_then_clear(capsys, make_ogb_folder):
    folder = make_ogb_folder()
    folder = folder.rename(folder.with_name("hit-then-verify"))  # a name of its own in the session's cache
    assert main(["preprocess", str(folder)]) == 0
    first = capsys.readouterr().out.strip().splitlines()
    assert "200 nodes" in first[0] and "peak memory" in first[0]
    assert main(["preprocess", str(folder)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == first[-1]
    assert main(["cache", "verify"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["cache", "list"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if f"{first[-1]} (" in line)
    assert re.search(r" \(\d+\.\d MiB, built 20\d\d-\d\d-\d\d \d\d:\d\d, from ", line) and line.endswith(f"{folder})")
    arrays = list((__import__("pathlib").Path(first[-1]) / "arrays").iterdir())
    arrays[0].write_bytes(arrays[0].read_bytes()[:-9] + b"corrupted")
    assert main(["cache", "verify"]) == 1
    assert "CORRUPT" in capsys.readouterr().out
    assert main(["cache", "clear", folder.name]) == 0


def test_cache_clear_of_a_folder_removes_its_cache_entry_and_never_the_folder(capsys, make_ogb_folder, tmp_path):
    """`gnnkit cache clear PATH` took PATH for a cache name, and `cache_root / PATH` is PATH itself: it
    deleted the user's dataset folder (and `..`, the folder above the cache, gnnkit's whole home)."""
    from pipeline import paths

    folder = make_ogb_folder()
    folder = folder.rename(folder.with_name("clear-by-folder"))  # ogb-0 of another test built the entry first
    assert main(["preprocess", str(folder)]) == 0
    entry = Path(capsys.readouterr().out.strip().splitlines()[-1])
    sibling = paths.cache_root().parent / "keep"
    sibling.mkdir()
    for name in ("..", str(paths.cache_root().parent), str(tmp_path)):
        assert main(["cache", "clear", name]) == 0
    assert (folder / "meta.json").is_file() and sibling.is_dir() and entry.is_dir()
    assert main(["cache", "clear", str(folder)]) == 0
    assert "removed 1 cache folder(s)" in capsys.readouterr().out
    assert (folder / "meta.json").is_file() and not entry.exists()
    assert main(["cache", "clear", str(tmp_path / "gone")]) == 2
    assert "no such folder" in capsys.readouterr().err
    for name in ("", "a/../..", "/etc"):
        with pytest.raises(ValueError, match="expected a dataset name"):
            paths.dataset_folder(paths.cache_root(), name)


def test_unknown_dataset_is_one_clear_line(capsys):
    assert main(["preprocess", "ogbn-prodcts"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown dataset 'ogbn-prodcts'" in err and "did you mean 'ogbn-products'" in err


def test_bad_folder_is_one_clear_line(capsys, make_ogb_folder):
    folder = make_ogb_folder()
    meta = json.loads((folder / "meta.json").read_text())
    del meta["eval metric"]
    (folder / "meta.json").write_text(json.dumps(meta))
    assert main(["preprocess", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gnnkit: error: {folder}/meta.json: missing meta key 'eval metric'"


def test_import_writes_a_folder_that_preprocess_takes_and_a_bad_file_is_one_line(capsys, tmp_path, monkeypatch):
    n = 300  # within 10x of Cora's 2,708 nodes: the Cora recipe is named
    mask = np.arange(n) < 100
    np.savez(tmp_path / "g.npz", x=np.eye(n, 4, dtype=np.float32),
             edge_index=np.array([np.arange(n), np.arange(n)[::-1]]), y=np.arange(n) % 3, train_mask=mask, val_mask=np.roll(mask, 100), test_mask=np.roll(mask, 200))
    assert main(["import", str(tmp_path / "g.npz"), str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"mine: {n} nodes, {n} edges, 4 features, 3 classes (acc); split train_mask/val_mask/test_mask: "
                   "train 100, valid 100, test 100",
                   f"train it: gnnkit run recipes/gcn_citation.yaml --data.dataset {tmp_path / 'mine'}"
                   "   (set for Cora, 2,708 nodes)", str(tmp_path / "mine")]
    assert main(["preprocess", str(tmp_path / "mine")]) == 0
    capsys.readouterr()
    featureless = tmp_path / "synthetic-tiny"  # a registry entry's name: the line gives the folder as a path
    np.savez(tmp_path / "bare.npz", edge_index=np.array([[0, 1], [1, 2]]), y=np.arange(n) % 2, num_nodes=n)
    monkeypatch.chdir(tmp_path)
    assert main(["import", "bare.npz", "synthetic-tiny", "--metric", "acc"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (  # run from elsewhere: the recipe's whole path
        f"train it: gnnkit run {ROOT / 'recipes' / 'gcn_citation.yaml'} --data.dataset ./synthetic-tiny "
        "--model.embedding_dim 64   (set for Cora, 2,708 nodes)")
    assert featureless.is_dir()
    assert main(["import", str(tmp_path / "g.npz"), str(tmp_path / "mine")]) == 2
    err = capsys.readouterr().err
    assert err == f"gnnkit: error: {tmp_path / 'mine'}: exists: expected a new folder to write the dataset into\n"


def test_import_of_a_heterophilous_graph_names_the_heterophily_recipe(capsys, tmp_path):
    """It named gcn_citation by size alone: 0.48 test accuracy on such a graph, where SAGE gave 0.75."""
    n, g = 600, np.random.default_rng(0)
    y = np.arange(n) % 2
    src = np.repeat(np.arange(n), 5)
    dst = (src + 2 * g.integers(0, n // 2, src.size) + 1) % n  # an odd step: always the other class
    np.savez(tmp_path / "g.npz", x=g.normal(size=(n, 4)).astype(np.float32), edge_index=np.array([src, dst]), y=y)
    assert main(["import", str(tmp_path / "g.npz"), str(tmp_path / "het")]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"train it: gnnkit run recipes/sage_heterophilous.yaml --data.dataset {tmp_path / 'het'}   (set for "
        "minesweeper, 10,000 nodes; heterophilous: adjusted homophily -1.00 on its training labels)")


def test_import_of_a_link_task_names_a_link_recipe_and_refuses_node_options(capsys, tmp_path):
    ring = np.array([np.arange(300), (np.arange(300) + 1) % 300])
    np.savez(tmp_path / "g.npz", edge_index=np.concatenate([ring, ring[::-1]], 1))
    assert main(["import", str(tmp_path / "g.npz"), str(tmp_path / "links"), "--task", "link", "--seed", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("links: 300 nodes, 300 undirected edges, no features; link prediction (rocauc); split random "
                      "85/5/10 of the pairs (seed 3): train 255, valid 15 (+15 drawn negatives), test 30 "
                      "(+30 drawn negatives)")
    assert out[1] == (f"train it: gnnkit run recipes/gae_citation.yaml --data.dataset {tmp_path / 'links'} "
                      "--model.embedding_dim 64   (set for Cora, 2,708 nodes)")
    assert main(["preprocess", str(tmp_path / "links")]) == 0
    capsys.readouterr()
    assert main(["import", str(tmp_path / "g.npz"), str(tmp_path / "other"), "--task", "link", "--split", "1"]) == 2
    assert capsys.readouterr().err == ("gnnkit: error: --split: picks one of several node masks; a link import makes "
                                       "its split (--seed)\n")
    tiny = tmp_path / "tiny.npz"  # far from every link recipe's reference: the nearest one, GAE's
    np.savez(tiny, edge_index=np.concatenate([ring[:, :40] % 40, ring[::-1, :40] % 40], 1))
    assert main(["import", str(tiny), str(tmp_path / "tiny"), "--task", "link"]) == 0
    assert "gae_citation.yaml" in capsys.readouterr().out.splitlines()[1]


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "gnnkit.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "preprocess" in out.stdout
    assert "``" not in out.stdout  # plain text, not the module docstring's reST


def test_cache_clear_of_a_folder_leaves_another_folder_of_the_same_name(capsys, make_ogb_folder, tmp_path):
    """Two folders named alike share cache/<name>/; clearing one removed both's entries."""
    first = make_ogb_folder()
    second = tmp_path / "elsewhere" / first.name
    shutil.copytree(make_ogb_folder(labels=np.ones(200, dtype=int)), second)
    entries = []
    for folder in (first, second):
        assert main(["preprocess", str(folder)]) == 0
        entries.append(Path(capsys.readouterr().out.strip().splitlines()[-1]))
    assert entries[0].parent == entries[1].parent and entries[0] != entries[1]
    assert main(["cache", "clear", str(second)]) == 0
    assert "removed 1 cache folder(s)" in capsys.readouterr().out
    assert entries[0].is_dir() and not entries[1].exists()


def test_cache_commands_cover_batch_caches(capsys, monkeypatch, tmp_path):
    import torch

    from pipeline.batch_cache import BatchCacheWriter, BatchRecord

    monkeypatch.setenv("GNNKIT_BATCHES", str(tmp_path / "batches"))
    folder = tmp_path / "batches" / "toy" / "abc"
    with BatchCacheWriter(folder, {"graph": "g"}) as writer:
        writer.add(BatchRecord({"x": torch.ones(4, 2)}, {"batch_size": 2}), seeds=torch.arange(2))
    assert main(["cache", "verify", "toy"]) == 0
    assert f"OK       {folder} (1 batches" in capsys.readouterr().out
    shard = folder / "shard-00000.bin"
    shard.write_bytes(shard.read_bytes()[:-8])
    assert main(["cache", "verify", "toy"]) == 1
    assert "truncated" in capsys.readouterr().out
    assert main(["cache", "clear", "toy"]) == 0
    assert not folder.exists()


def test_every_listed_command_comes_from_its_module_with_the_same_help():
    for module in sorted({m for m, _ in COMMANDS.values()}):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).add_parser(sub)
        helps = {action.dest: action.help for action in sub._choices_actions}
        assert helps == {n: h for n, (m, h) in COMMANDS.items() if m == module}, module


def test_the_parser_is_complete_for_the_invoked_command_only():
    assert build_parser(["preprocess", "x"]).parse_args(["preprocess", "x", "--force"]).force
    with pytest.raises(SystemExit):  # listed, but not loaded: it takes no arguments
        build_parser(["--help"]).parse_args(["preprocess", "x"])


def test_dataset_commands_comm_plan_and_a_missing_recipe_import_neither_torch_nor_lightning(make_ogb_folder,
                                                                                             tmp_path):
    folder = make_ogb_folder()
    assert main(["preprocess", str(folder)]) == 0  # the hits below must not build
    assert main(["partition", str(folder), "--parts", "2"]) == 0
    np.savez(tmp_path / "g.npz", edge_index=np.array([[0, 1], [1, 2]]), y=np.arange(40) % 3)
    imported = [str(tmp_path / "g.npz"), str(tmp_path / "g")]
    code = f"""
import contextlib, io, sys
from gnnkit.cli import main
for argv in ([], ["datasets"], ["preprocess", {str(folder)!r}], ["partition", {str(folder)!r}, "--parts", "2"],
             ["cache", "verify"], ["cache", "list"], ["comm", "plan", "--params", "1e6", "--ranks", "4"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        assert main(argv or ["--help"]) == 0, argv
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "lightning", "pandas"))
    assert not heavy, (argv, heavy[:5])
with contextlib.redirect_stderr(io.StringIO()):  # a recipe path that is no file: refused before Lightning
    assert main(["run", "no-such-recipe.yaml", "--trainer.max_epochs", "1"]) == 2
with contextlib.redirect_stdout(io.StringIO()):  # an .npz graph imported (its split files are written by pandas)
    assert main(["import", *{imported!r}]) == 0
assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "lightning")]
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@pytest.mark.parametrize(("recipe", "line"), [
    ("recipes/sage_arixv.yaml", "recipe recipes/sage_arixv.yaml: no such file; did you mean recipes/sage_arxiv.yaml?"),
    ("sage_arxiv.yml", "recipe sage_arxiv.yml: no such file; did you mean recipes/sage_arxiv.yaml?"),
    ("recipes", "recipe recipes: a folder, not a recipe file"),
    ("mine.yaml", "recipe mine.yaml: no such file"),
], ids=["typo", "folder left out", "folder", "nothing close"])
def test_a_recipe_that_is_no_file_is_one_line_with_the_closest_recipe(tmp_path, monkeypatch, capsys, recipe, line):
    (tmp_path / "recipes").mkdir()
    for name in ("sage_arxiv.yaml", "gcn_arxiv.yaml", "quickstart.yaml"):
        (tmp_path / "recipes" / name).write_text("trainer: {}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", recipe, "--trainer.max_epochs", "1"]) == 2
    assert capsys.readouterr().err == f"gnnkit: error: {line}\n"


def test_gnnkit_run_without_a_recipe_is_one_line_with_the_usage(capsys):
    """argparse's own error there listed the pass-through arguments as required and showed the help
    flag as '[ h]' (its prefix character is a NUL, so every --flag reaches LightningCLI)."""
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gnnkit: error: gnnkit run: expected a recipe or --resume RUN_DIR (usage: gnnkit run RECIPE")
    assert len(err.splitlines()) == 1
    assert "[ h]" not in build_parser(["run"])._subparsers._group_actions[0].choices["run"].format_usage()


def test_a_reader_that_leaves_the_pipe_ends_the_command_quietly():
    """`gnnkit datasets | head -1`: the output's reader is gone; no BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "gnnkit.cli", "datasets"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE and result.stderr == "", result.stderr[-2000:]


def test_lost_rank_is_one_line_and_exit_1(capsys, monkeypatch):
    from gnnkit.data import cli as data_cli
    from gnnkit.comm import failures

    def lost(args):
        err = RuntimeError("gnnkit comm: a collective failed on rank 0 of 2: lost rank 1 (died, pid 7)")
        setattr(err, failures.MARK, True)
        raise err

    monkeypatch.setattr(data_cli, "_datasets", lost)
    assert main(["datasets"]) == 1
    assert capsys.readouterr().err == "gnnkit: error: gnnkit comm: a collective failed on rank 0 of 2: lost rank 1 (died, pid 7)\n"


def test_other_runtime_errors_are_not_swallowed(monkeypatch):
    from gnnkit.data import cli as data_cli

    def broken(args):
        raise RuntimeError("something else")

    monkeypatch.setattr(data_cli, "_datasets", broken)
    with pytest.raises(RuntimeError, match="something else"):
        main(["datasets"])


def test_partition_command_writes_and_then_finds_the_parts(capsys, make_ogb_folder):
    folder = make_ogb_folder()
    assert main(["partition", str(folder), "--parts", "2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("part 0/2: ") and out[1].startswith("part 1/2: ") and "halo nodes" in out[0]
    assert "2 parts by METIS, edge cut" in out[2]
    assert main(["partition", str(folder), "--parts", "2"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[:2] == out[:2]
    assert main(["partition", str(folder), "--parts", "0"]) == 2
    assert "gnnkit: error: parts: expected 1 to 200" in capsys.readouterr().err


def test_a_dataset_s_cache_commands_cover_its_partition_entries(capsys, make_ogb_folder):
    """`cache list NAME` did not show NAME.part0of2 and `cache clear NAME` left the partitions behind."""
    from pipeline import paths

    folder = make_ogb_folder()
    assert main(["partition", str(folder), "--parts", "2"]) == 0
    capsys.readouterr()
    assert main(["cache", "list", str(folder)]) == 0
    listed = capsys.readouterr().out
    assert f"{folder.name}.part0of2" in listed and f"{folder.name}.part1of2" in listed
    assert main(["cache", "clear", str(folder)]) == 0
    assert not any(p.name.startswith(f"{folder.name}.part") for p in paths.cache_root().iterdir())


def test_ctrl_c_is_one_line_and_the_shells_status(capsys, monkeypatch):
    """Ctrl-C during a command: no KeyboardInterrupt traceback (the temps it was writing are removed
    as the exception unwinds); exit 130 as a shell reports it."""
    import gnnkit.data.cli as data_cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(data_cli, "_datasets", interrupted)
    assert main(["datasets"]) == 130
    assert capsys.readouterr().err == "gnnkit: interrupted\n"


def test_ctrl_c_that_lightning_turned_into_exit_1_is_an_interruption(capsys, monkeypatch):
    """Lightning catches a fit's KeyboardInterrupt, shuts down and calls exit(1): that reads as an
    interruption (one line, status 130) and Python's Ctrl-C handler is back afterwards."""
    import os
    import signal

    import gnnkit.data.cli as data_cli

    def fit_interrupted(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a call that lets the handler run
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Lightning does while shutting down
            raise SystemExit(1) from None
        raise AssertionError("no KeyboardInterrupt")

    monkeypatch.setattr(data_cli, "_datasets", fit_interrupted)
    assert main(["datasets"]) == 130
    assert capsys.readouterr().err == "gnnkit: interrupted (gnnkit run --resume RUN_DIR continues a run)\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_exit_1_without_ctrl_c_stays_exit_1(monkeypatch):
    import gnnkit.data.cli as data_cli

    def failed(args):
        raise SystemExit(1)

    monkeypatch.setattr(data_cli, "_datasets", failed)
    with pytest.raises(SystemExit) as stop:
        main(["datasets"])
    assert stop.value.code == 1


def test_an_allocation_beyond_the_machine_is_one_line(capsys, monkeypatch):
    import gnnkit.data.cli as data_cli

    def too_big(args):
        return np.empty(2**45, dtype=np.int64)  # 256 TiB

    monkeypatch.setattr(data_cli, "_datasets", too_big)
    assert main(["datasets"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gnnkit: error: out of memory: Unable to allocate") and err.count("\n") == 1


CUDA_OOM = ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.8 GiB of which 1.2 GiB "
            "is free. Including non-PyTorch memory, this process has 138.6 GiB memory in use. Of the allocated memory "
            "137.1 GiB is allocated by PyTorch. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


@pytest.mark.parametrize("raised, line", [
    (lambda: __import__("torch").empty(2**45),  # 128 TiB on the CPU: torch's allocator refuses it
     "out of memory: DefaultCPUAllocator: can't allocate memory: you tried to allocate 140737488355328 bytes"),
    (lambda: (_ for _ in ()).throw(__import__("torch").OutOfMemoryError(CUDA_OOM)),
     "out of memory: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.8 GiB of "
     "which 1.2 GiB is free; a smaller data.batch_size, data.num_neighbors, data.eval_batch_size or "
     "model.hidden_channels needs less, as does model.aggregation gnnkit (PyG's layers hold a message per edge)"),
], ids=["cpu", "cuda"])
def test_torchs_failed_allocations_are_one_line_with_what_to_make_smaller(capsys, monkeypatch, raised, line):
    """A run says what to make smaller; another command (no batch to shrink) only what failed."""
    import gnnkit.data.cli as data_cli
    import gnnkit.run_command as run_command

    monkeypatch.setattr(run_command, "_run_command", lambda args: raised())
    assert main(["run", "recipe.yaml"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gnnkit: error: {line}") and err.count("\n") == 1
    assert err.rstrip().endswith("needs less, as does model.aggregation gnnkit (PyG's layers hold a message per edge)")
    monkeypatch.setattr(data_cli, "_datasets", lambda args: raised())
    assert main(["datasets"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gnnkit: error: out of memory: ") and "needs less" not in err and err.count("\n") == 1


def test_a_bare_memory_error_names_itself(capsys, monkeypatch):
    import gnnkit.data.cli as data_cli

    def bare(args):
        raise MemoryError

    monkeypatch.setattr(data_cli, "_datasets", bare)
    assert main(["datasets"]) == 1
    assert capsys.readouterr().err == "gnnkit: error: out of memory: MemoryError\n"


def test_sigterm_is_a_failure_status(capsys, monkeypatch):
    """Lightning stops a run on SIGTERM (a scheduler's preemption, `timeout`) with an exception that
    exits without a code: the run ended with status 0, a success, without its test or report."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    import gnnkit.data.cli as data_cli

    def terminated(args):
        raise SIGTERMException

    monkeypatch.setattr(data_cli, "_datasets", terminated)
    assert main(["datasets"]) == 143
    assert capsys.readouterr().err == "gnnkit: stopped by SIGTERM (gnnkit run --resume RUN_DIR continues a run)\n"


def test_sigterm_names_the_run_folder_the_run_noted(capsys, monkeypatch):
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    import gnnkit.data.cli as data_cli

    def noted(args):
        stop = SIGTERMException()
        stop.gnnkit_run_dir = "/r/quickstart-1"  # as gnnkit.run.run notes it
        raise stop

    monkeypatch.setattr(data_cli, "_datasets", noted)
    assert main(["datasets"]) == 143
    assert capsys.readouterr().err == "gnnkit: stopped by SIGTERM (gnnkit run --resume /r/quickstart-1 continues it)\n"


def test_gnnkit_warnings_are_their_own_line_and_others_pythons(capsys, monkeypatch):
    """The native kernels' fallback came as `.../loader.py:318: RuntimeWarning: gnnkit: ...` and its
    source line `  module = get()`, spliced into doctor's table."""
    import warnings

    import gnnkit.data.cli as data_cli

    def warns(args):
        warnings.warn("gnnkit: native kernels unavailable, using pure PyTorch (FileNotFoundError: x)", RuntimeWarning)
        warnings.warn("a library's own", UserWarning)
        return 0

    monkeypatch.setattr(data_cli, "_datasets", warns)
    others: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: others.append(str(message)))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["datasets"]) == 0
    assert capsys.readouterr().err == "gnnkit: native kernels unavailable, using pure PyTorch (FileNotFoundError: x)\n"
    assert others == ["a library's own"]  # shown as Python shows it


@pytest.mark.parametrize(("argv", "line"), [
    (["import", "g.pt", "out", "--task", "nodes"], "argument --task: invalid choice: 'nodes' (choose from 'node', "
                                                   "'link', 'graph') (see gnnkit import --help)"),
    (["preprocess", "--forc", "synthetic-tiny"], "unrecognized arguments: --forc (see gnnkit --help)"),
])
def test_a_commands_mistake_is_one_line_and_no_abbreviation_is_taken(capsys, argv, line):
    """argparse printed its usage block before the error, and took `--forc` for `--force` (which
    rebuilt the entry); `gnnkit run` already did neither."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and capsys.readouterr().err == f"gnnkit: error: {line}\n"


def test_a_cache_command_for_a_name_with_nothing_cached_says_so(tmp_path, monkeypatch, capsys):
    """`cache list/verify/clear synthetic-tinyy` printed nothing (or "removed 0") and exited 0."""
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path))
    monkeypatch.delenv("GNNKIT_CACHE", raising=False)
    (tmp_path / "cache" / "synthetic-tiny" / "abc").mkdir(parents=True)
    for action in ("list", "verify", "clear"):
        assert main(["cache", action, "synthetic-tinyy"]) == (2 if action == "verify" else 0)  # nothing verified
        assert capsys.readouterr().err == ("gnnkit: no cache entry or batch cache of 'synthetic-tinyy'; did you "
                                           "mean 'synthetic-tiny'?\n")
    assert (tmp_path / "cache" / "synthetic-tiny" / "abc").is_dir()
    main(["cache", "list", "synthetic-tiny"])
    assert capsys.readouterr().err == ""
    assert main(["cache", "clear", ""]) == 2  # named the current folder's entries
    assert capsys.readouterr().err == "gnnkit: error: dataset: expected a dataset name or an OGB-format folder, got ''\n"
    assert (tmp_path / "cache" / "synthetic-tiny" / "abc").is_dir()


def test_a_path_the_system_refuses_is_one_line(capsys, monkeypatch):
    """`--run_dir /proc/gnn`, `GNNKIT_HOME=/proc/x`, `formats calibrate --out` under a file: tracebacks."""
    import errno

    import gnnkit.data.cli as data_cli

    for error, status in [(FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/gnn"), 2),
                          (OSError(errno.ENOSPC, "No space left on device", "/data/x.arrow"), 1)]:
        def refused(args, error=error):
            raise error

        monkeypatch.setattr(data_cli, "_datasets", refused)
        assert main(["datasets"]) == status
        assert capsys.readouterr().err == f"gnnkit: error: {error.filename}: {error.strerror}\n"

    def unnamed(args):
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    monkeypatch.setattr(data_cli, "_datasets", unnamed)
    with pytest.raises(ConnectionResetError):  # no path to name: as it is
        main(["datasets"])

    def full_in_a_run(args):  # a write with no file name in a run: gnnkit.run notes the run folder
        error = OSError(errno.ENOSPC, "No space left on device")
        error.gnnkit_run_dir = "runs/r"
        raise error

    monkeypatch.setattr(data_cli, "_datasets", full_in_a_run)
    assert main(["datasets"]) == 1 and capsys.readouterr().err == "gnnkit: error: runs/r: No space left on device\n"

    def files_in_a_run(args):  # not a write's error: the run folder is not to blame, the traceback stays
        error = OSError(errno.EMFILE, "Too many open files")
        error.gnnkit_run_dir = "runs/r"
        raise error

    monkeypatch.setattr(data_cli, "_datasets", files_in_a_run)
    with pytest.raises(OSError, match="Too many open files"):
        main(["datasets"])


def test_a_full_disk_while_preprocessing_names_the_folder_written_to(tmp_path, monkeypatch, capsys):
    """A full disk mid-build (a tmpfs of 60 MB) was a 32-40 line traceback ending in OSError 28."""
    import errno

    from pipeline import cache as cache_module

    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path))
    monkeypatch.delenv("GNNKIT_CACHE", raising=False)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_module, "publish", full)
    assert main(["preprocess", "synthetic-tiny"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (f"gnnkit: error: {tmp_path / 'cache' / 'synthetic-tiny'}: No "
                                                       "space left on device")


def test_gnnkit_home_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    """It was NotADirectoryError from deep in preprocess, and an empty listing from `cache list`."""
    home = tmp_path / "home"
    home.write_text("")
    monkeypatch.setenv("GNNKIT_HOME", str(home))
    monkeypatch.delenv("GNNKIT_CACHE", raising=False)
    for argv in (["preprocess", "synthetic-tiny"], ["cache", "list"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"gnnkit: error: GNNKIT_HOME: {home} is a file (expected a folder for " \
                                          "gnnkit's data and caches)\n"


def test_cache_verify_of_one_dataset_leaves_the_others_entries_alone(tmp_path, monkeypatch, capsys, make_ogb_folder):
    from pipeline import paths

    folder = make_ogb_folder()
    assert main(["preprocess", str(folder)]) == 0
    other = paths.cache_root() / "other" / "abc"
    other.mkdir(parents=True)
    (other / "manifest.json").write_text("{")
    capsys.readouterr()
    assert main(["cache", "verify", folder.name]) == 0
    assert "other" not in capsys.readouterr().out
    assert main(["cache", "verify", "other"]) == 1
    assert f"CORRUPT  {other}: unreadable manifest" in capsys.readouterr().out
    shutil.rmtree(other.parent)  # the session's cache is shared with later tests


def test_a_killed_batch_recordings_temp_is_listed_and_cleared(capsys, monkeypatch):
    """A reuse run killed while recording left its shards in a temp under the batch caches, which no
    command showed or removed."""
    from pipeline import paths, temp_paths

    temp = temp_paths.make_temp_dir(paths.batch_root() / "toy" / "0123abcd")
    (temp / "shard-0.bin").write_bytes(b"")
    monkeypatch.setattr(temp_paths, "pid_alive", lambda pid: False)  # its recorder was killed
    assert main(["cache", "list"]) == 0
    assert f"STALE    {temp} (left by an interrupted generation or batch recording" in capsys.readouterr().out
    assert main(["cache", "clear", "toy"]) == 0  # a name: the session's other entries stay
    assert f"removed {temp}" in capsys.readouterr().out and not temp.exists()


def test_preprocess_and_partition_build_the_entry_a_recipe_s_run_uses(capsys, make_ogb_folder, tmp_path):
    """`gnnkit partition DATASET` took the registry's preprocessing: for a recipe that sets its own
    (citation recipes: data.preprocess.normalize_features auto) the run built another entry and
    partitioned again."""
    import yaml

    from gnnkit.data.datamodule import GraphDataModule
    from gnnkit.data.preprocessing import PreprocessOverrides

    folder = make_ogb_folder()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"data": {"dataset": str(folder), "undirected": True, "partitions": 2,
                                               "preprocess": {"normalize_features": "row"}}}))
    run = GraphDataModule(str(folder), undirected=True, preprocess=PreprocessOverrides(normalize_features="row"))
    assert main(["preprocess", "--recipe", str(recipe)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(run.entry.path)
    assert main(["preprocess", str(folder)]) == 0  # the registry's: directed, features as stored
    assert capsys.readouterr().out.strip().splitlines()[-1] != str(run.entry.path)
    assert main(["partition", "--recipe", str(recipe)]) == 0  # data.partitions: 2
    assert "2 parts by METIS" in capsys.readouterr().out
    # the run's seed and folders: it partitions with data.seed, in data.cache_root
    from pipeline.partitioned import partition_entry

    recipe.write_text(yaml.safe_dump({"data": {"dataset": str(folder), "partitions": 2, "seed": 5,
                                               "cache_root": str(tmp_path / "alt")}}))
    assert main(["partition", "--recipe", str(recipe)]) == 0
    printed = [line.split()[-1] for line in capsys.readouterr().out.splitlines()[:2]]
    run = GraphDataModule(str(folder), cache_root=str(tmp_path / "alt"))
    assert printed == [str(p.path) for p in partition_entry(run.entry, 2, seed=5)]
    assert all(path.startswith(str(tmp_path / "alt")) for path in printed)
    capsys.readouterr()
    recipe.write_text(yaml.safe_dump({"data": {"dataset": str(folder), "preprocess": {"normalise": "row"}}}))
    assert main(["partition", "--recipe", str(recipe), "--parts", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"gnnkit: error: {recipe}: data.preprocess: expected a mapping of "
                                               "['normalize_features', 'memory_budget_mb'], got {'normalise': 'row'}")
    assert main(["partition", str(folder)]) == 2
    assert "--parts: expected a number of partitions (or --recipe with data.partitions)" in capsys.readouterr().err
