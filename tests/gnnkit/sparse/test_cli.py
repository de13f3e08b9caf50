import pytest
import torch

from gnnkit.cli import main
from gnnkit.sparse import FORMATS
from gnnkit.sparse import selector as selector_module
from gnnkit.sparse.selector import SHIPPED_MODEL, calibrated_path, current_selector, model_path


def test_list_shows_formats_and_model(capsys):
    assert main(["formats", "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FORMATS) and str(SHIPPED_MODEL) in out
    assert "cpu: " in out and "cuda: " in out and "[cpu, cuda]" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("command", [["calibrate"], ["explain", "somewhere"]])
def test_device_option_refuses_cuda_without_a_gpu_in_one_line(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["formats", *command, "--device", "cuda"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --device: 'cuda': CUDA is not available here" in err
    with pytest.raises(SystemExit):
        main(["formats", *command, "--device", "tpu"])
    assert "'tpu' is not a device gnnkit's formats run on" in capsys.readouterr().err


def test_explain_prints_features_prediction_and_measured_times(capsys, make_ogb_folder):
    folder = make_ogb_folder()
    assert main(["formats", "explain", str(folder), "--width", "8", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "row_cv" in out and "dia_fill" in out and "ell_fill" in out
    assert out.count("auto uses") == 2 and out.count("why: ") == 2 and "backward A^T @ dY" in out
    assert "<- auto" in out and "<- fastest" in out
    assert "model: cpu: " in out and out.count("model: the cpu model (") == 2
    for name in ("csr", "coo", "segment", "gather_scatter"):
        assert f"\n  {name} " in out
    products = int(out.split(" products per pass and width")[0].rsplit("= ", 1)[1])  # the cost column's, too
    assert f"cost = spmm + convert / {products} (conversion amortised over the run's products)" in out


def test_explain_takes_products_per_epoch_with_or_without_epochs(capsys, make_ogb_folder):
    """--calls-per-epoch alone was ignored: the run stayed auto's assumed 1 product an epoch."""
    from gnnkit.sparse.decision import current_run_length

    folder, assumed = make_ogb_folder(), current_run_length()
    for extra, run in ((["--calls-per-epoch", "5"], f"{assumed.epochs} epochs x 5 "),
                       (["--epochs", "10"], "10 epochs x 2 "),
                       ([], f"{assumed.epochs} epochs x {assumed.calls_per_epoch} ")):
        assert main(["formats", "explain", str(folder), "--width", "8", "--no-measure", *extra]) == 0
        assert f"run: {run}products per epoch" in capsys.readouterr().out


def test_calibrate_writes_a_model_that_is_used_from_then_on(capsys):
    assert not calibrated_path().exists()
    try:
        assert main(["formats", "calibrate", "--count", "3", "--max-rows", "1500", "--max-nnz", "5000",
                     "--widths-per-matrix", "1", "--repeats", "1", "--folds", "0"]) == 0
        out = capsys.readouterr().out
        assert "[3/3]" in out and str(calibrated_path()) in out
        assert model_path() == calibrated_path()
        assert current_selector().meta["calibrated"] is True and current_selector().meta["matrices"] == 3
        assert current_selector().device == "cpu" and "on cpu" in out and model_path("cuda") is None
        times = current_selector().meta["time_model"]  # this machine's absolute times for auto's check
        assert times["s_per_nnz_width"] > 0 and times["convert_s_per_nnz"]["csr"] > 0
    finally:
        calibrated_path().unlink(missing_ok=True)
        selector_module._loaded.clear()
    assert model_path() == SHIPPED_MODEL


def test_calibrate_to_another_path_says_how_to_use_it(capsys, tmp_path):
    """It claimed the model was used from now on; only the calibrated path is read unnamed."""
    out = tmp_path / "mine.json"
    assert main(["formats", "calibrate", "--count", "3", "--max-rows", "1500", "--max-nnz", "5000",
                 "--widths-per-matrix", "1", "--repeats", "1", "--folds", "0", "--out", str(out)]) == 0
    assert f"saved {out} (to use it: export GNNKIT_SELECTOR={out})" in capsys.readouterr().out
    assert model_path() == SHIPPED_MODEL and out.is_file()
