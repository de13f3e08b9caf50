import json

import numpy as np
import pytest
import torch

from gnnkit.sparse import FORMATS, Adjacency, plan, spmm
from gnnkit.sparse import decision
from gnnkit.sparse import selector as selector_module
from gnnkit.sparse.calibrate import (fit_selector, label_corpus, read_records, records_device, relabel_formats,
                                     selection_quality)
from gnnkit.sparse.corpus import GENERATORS, MatrixSpec, sample_specs
from gnnkit.sparse.features import FEATURE_NAMES
from gnnkit.sparse.forest import TreeEnsemble
from gnnkit.sparse.measure import FormatTiming
from gnnkit.sparse.selector import (SHIPPED_MODEL, Selector, calibrated_path, choose_format, current_selector,
                                    device_kind, model_path, set_selector)
from pipeline import DatasetError


def stump(feature: int, threshold: float, low: list[float], high: list[float]) -> dict:
    return {"feature": [feature, 0, 0], "threshold": [threshold, 0.0, 0.0], "left": [1, -1, -1],
            "right": [2, -1, -1], "value": [[0.0] * len(low), low, high]}


def test_tree_ensemble_matches_sklearn_predictions():
    ensemble_mod = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    y = np.stack([x[:, 0] > 0.3, x[:, 1] * x[:, 2]], 1).astype(float)
    forest = ensemble_mod.RandomForestRegressor(n_estimators=7, max_depth=6, random_state=0).fit(x, y)
    ours = TreeEnsemble.from_sklearn(forest)
    ours = TreeEnsemble(json.loads(json.dumps(ours.to_json())), 5, 2)  # through JSON
    for row in x[:50]:
        np.testing.assert_allclose(ours.predict(row), forest.predict(row[None])[0], atol=1e-5)


def test_tree_ensemble_rejects_malformed_models():
    with pytest.raises(ValueError, match="outside"):
        TreeEnsemble([stump(9, 0.5, [1.0], [2.0])], num_features=3, num_outputs=1)
    with pytest.raises(ValueError, match="outputs"):
        TreeEnsemble([stump(0, 0.5, [1.0], [2.0])], num_features=3, num_outputs=2)
    cyclic = stump(0, 0.5, [1.0], [2.0]) | {"left": [1, 0, -1]}
    with pytest.raises(ValueError, match="cycle"):
        TreeEnsemble([cyclic], num_features=3, num_outputs=1)


def test_shipped_model_loads_without_pickle_and_is_plain_json():
    data = json.loads(SHIPPED_MODEL.read_text())
    assert data["kind"] == "gnnkit-spmm-selector" and data["features"] == list(FEATURE_NAMES)
    selector = Selector.load(SHIPPED_MODEL)
    assert set(selector.formats) <= set(FORMATS)
    assert selector.meta["matrices"] >= 300 and selector.meta["samples"] >= 300  # the corpus size


def test_shipped_selector_gives_a_valid_format_for_any_matrix():
    selector = Selector.load(SHIPPED_MODEL)
    matrices = [MatrixSpec(kind, 300, 200 if kind == "bipartite" else 300, 5, 1).build() for kind in GENERATORS]
    matrices.append(Adjacency(torch.zeros(4, dtype=torch.long), torch.zeros(0, dtype=torch.long)))
    for adj in matrices:
        for width in (1, 16, 256, 4096):
            for transpose in (False, True):
                name = selector.select(adj, width, transpose=transpose)
                assert name in FORMATS and FORMATS[name].applicable(adj)


def test_selector_follows_its_model_and_skips_inapplicable_formats():
    # dense predicted best below 100 columns, bsr16 (never applicable here) best above
    formats = ["csr", "dense", "bsr16"]
    col = FEATURE_NAMES.index("n_cols")
    tree = stump(col, 100.0, [1.0, 0.0, 2.0], [1.0, 2.0, 0.0])
    selector = Selector(TreeEnsemble([tree], len(FEATURE_NAMES), 3), formats)
    small = MatrixSpec("erdos_renyi", 50, 50, 3, 0).build()
    large = MatrixSpec("erdos_renyi", 3000, 3000, 1.5, 0).build()
    assert selector.select(small, 16) == "dense"
    assert not FORMATS["bsr16"].applicable(large)
    assert selector.select(large, 16) == "csr"
    cautious = Selector(selector.ensemble, formats, margin=1.5)  # dense must win by more than 1.5
    assert cautious.select(small, 16) == "csr"
    assert Selector(selector.ensemble, formats, margin=0.9).select(small, 16) == "dense"
    with pytest.raises(ValueError, match="margin must be >= 0"):
        Selector(selector.ensemble, formats, margin=-1)
    set_selector(selector)
    try:
        assert current_selector() is selector
        assert plan(small, 8).forward == "dense" and plan(small, 8, "segment").forward == "segment"
    finally:
        set_selector(None)
    assert current_selector() is not selector


def test_single_use_matrices_only_get_conversion_free_formats():
    formats = ["csr", "coo", "segment"]
    tree = stump(0, 1e12, [2.0, 0.0, 1.0], [2.0, 0.0, 1.0])  # coo predicted best, then segment
    selector = Selector(TreeEnsemble([tree], len(FEATURE_NAMES), 3), formats)
    spec = MatrixSpec("rmat", 200, 200, 4, 0)
    assert selector.select(spec.build(), 16) == "coo"
    one_off = spec.build()
    one_off.single_use = True
    assert selector.select(one_off, 16) == "segment" and selector.select(one_off, 16, transpose=True) == "segment"
    assert [name for name, _ in selector.rank(one_off, 16)] == ["segment", "csr"]


def test_close_calls_are_timed_on_the_matrix(monkeypatch):
    # gather-scatter predicted a little cheaper than CSR; the (fake) timing finds CSR several times faster
    formats = ["csr", "gather_scatter"]
    close = Selector(TreeEnsemble([stump(0, 1e12, [0.1, 0.0], [0.1, 0.0])], len(FEATURE_NAMES), 2), formats)
    far = Selector(TreeEnsemble([stump(0, 1e12, [2.0, 0.0], [2.0, 0.0])], len(FEATURE_NAMES), 2), formats)
    timed = []

    def timer(adj, width, names, repeats, dtype=torch.float32):
        timed.append(names)
        return {n: FormatTiming(0.0, {"csr": 0.2, "gather_scatter": 1.0}[n], repeats) for n in names}

    monkeypatch.setattr(decision, "_timer", timer)
    spec = MatrixSpec("rmat", 20000, 20000, 8, 0)
    adj, one_off = spec.build(), spec.build()
    one_off.single_use = True
    set_selector(close)
    try:
        assert choose_format(adj, 64, verify=False) == "gather_scatter" and timed == []
        assert choose_format(adj, 64) == "csr" and choose_format(adj, 64, transpose=True) == "csr"
        assert len(timed) == 4  # each pass's switch timed twice (the second confirms it)
        assert choose_format(one_off, 64) == "gather_scatter"  # one product cannot repay a measurement
        monkeypatch.setenv("GNNKIT_SPMM_VERIFY", "0")
        assert choose_format(adj, 64) == "gather_scatter"
        monkeypatch.delenv("GNNKIT_SPMM_VERIFY")
        set_selector(far)  # the runner-up is predicted e^2 = 7.4x slower: the model decides alone
        assert choose_format(adj, 64) == "gather_scatter" and len(timed) == 4
    finally:
        set_selector(None)


def test_model_file_round_trip_and_environment_override(tmp_path, monkeypatch):
    formats = ["csr", "segment"]
    selector = Selector(TreeEnsemble([stump(0, 1.0, [0.0, 1.0], [1.0, 0.0])], len(FEATURE_NAMES), 2), formats,
                        {"note": "test"})
    path = selector.save(tmp_path / "model.json")
    monkeypatch.setenv("GNNKIT_SELECTOR", str(path))
    loaded = current_selector()
    assert loaded.formats == formats and loaded.meta["note"] == "test"
    assert repr(loaded) == "Selector(device=cpu, formats=['csr', 'segment'], trees=1, default=csr, margin=0)"
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "something-else", "version": 1}))
    with pytest.raises(ValueError, match="not a gnnkit selector model"):
        Selector.load(tmp_path / "bad.json")
    monkeypatch.setenv("GNNKIT_SELECTOR", str(tmp_path / "missing.json"))
    with pytest.raises(DatasetError, match="^GNNKIT_SELECTOR: selector model .* not found; run 'gnnkit formats"):
        current_selector()
    monkeypatch.setenv("GNNKIT_SELECTOR", str(tmp_path / "bad.json"))  # a traceback after `formats list`'s table
    with pytest.raises(DatasetError, match="^GNNKIT_SELECTOR: .*not a gnnkit selector model.* calibrate' wrote\\)$"):
        current_selector()
    selector_module._loaded.clear()


def test_prediction_is_cheap_compared_with_its_inputs():
    # not a timing assertion: the ensemble is a bounded number of array steps per prediction
    selector = Selector.load(SHIPPED_MODEL)
    assert selector.ensemble._depth <= 16 and len(selector.ensemble.trees) <= 128


def test_label_fit_and_evaluate_a_tiny_corpus(tmp_path):
    specs = sample_specs(4, seed=3, min_rows=200, max_rows=800)
    path = tmp_path / "labels.jsonl"
    records = label_corpus(specs, path, widths_per_matrix=1, repeats=1)
    assert {r["matrix"] for r in records} == {s.name for s in specs}
    assert all("csr" in r["times"] and r["times"]["csr"]["spmm_s"] > 0 for r in records)
    again = label_corpus(specs, path, widths_per_matrix=1, repeats=1)  # resumes: nothing re-measured
    assert len(again) == len(records)
    # a run killed while writing the last matrix leaves part of a line: the next drops it, labels the matrix again
    lines = path.read_text().splitlines(keepends=True)
    last = [i for i, line in enumerate(lines) if json.loads(line)["matrix"] == specs[-1].name]
    path.write_text("".join(lines[: last[0]]) + lines[last[0]][:40])
    resumed = label_corpus(specs, path, widths_per_matrix=1, repeats=1)
    assert sorted(r["matrix"] for r in resumed) == sorted(r["matrix"] for r in records)
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == len(records)
    selector = fit_selector(records, n_trees=3, max_depth=3)
    quality = selection_quality(selector, records)
    assert quality["selected_over_oracle"] >= 1.0 and 0.0 <= quality["accuracy"] <= 1.0
    loaded = Selector.load(selector.save(tmp_path / "sel.json"))
    adj = specs[0].build()
    assert loaded.select(adj, 32) == selector.select(adj, 32)


def test_relabel_re_times_only_the_named_formats(tmp_path):
    specs = sample_specs(2, seed=4, min_rows=200, max_rows=600)
    path = tmp_path / "labels.jsonl"
    records = label_corpus(specs, path, widths_per_matrix=1, repeats=1)
    stale = {"convert_s": 9.0, "spmm_s": 9.0, "repeats": 1}  # a kernel that has since become faster
    path.write_text("".join(json.dumps({**r, "times": {**r["times"], "csr": stale}}) + "\n" for r in records))
    relabel_formats(path, ["csr"], repeats=1)
    updated = read_records(path)
    assert [r["matrix"] for r in updated] == [r["matrix"] for r in records]  # order and samples kept
    for old, new in zip(records, updated):
        assert new["times"]["csr"]["spmm_s"] < 1.0 and set(new["relabelled"]) == {"csr"}
        others = {k: v for k, v in new["times"].items() if k != "csr"}
        assert others == {k: v for k, v in old["times"].items() if k != "csr"}


def _two_format_selector(device: str = "cpu") -> Selector:
    return Selector(TreeEnsemble([stump(0, 1e12, [1.0, 0.0], [1.0, 0.0])], len(FEATURE_NAMES), 2),
                    ["csr", "segment"], device=device)


def test_each_device_kind_has_its_own_model(tmp_path, monkeypatch):
    assert device_kind("cuda:1") == "cuda" and device_kind(torch.device("cpu")) == "cpu"
    with pytest.raises(ValueError, match="no SpMM formats for device kind 'meta'"):
        device_kind("meta")
    assert calibrated_path("cuda").name == "selector_cuda.json" and calibrated_path("cpu").name == "selector.json"
    cuda_model = _two_format_selector("cuda")
    set_selector(cuda_model)  # serves the kind it was measured on
    try:
        assert current_selector("cuda") is cuda_model and current_selector("cpu") is not cuda_model
    finally:
        set_selector(None, "cuda")
    assert current_selector("cpu").device == "cpu"
    path = cuda_model.save(tmp_path / "gpu.json")
    assert json.loads(path.read_text())["device"] == "cuda" and Selector.load(path).device == "cuda"
    monkeypatch.setenv("GNNKIT_SELECTOR_CUDA", str(path))
    assert model_path("cuda") == path and current_selector("cuda").device == "cuda"
    monkeypatch.setenv("GNNKIT_SELECTOR", str(path))  # a GPU model named for CPU matrices: refused
    with pytest.raises(ValueError, match="measured on cuda, but it is set for cpu"):
        current_selector("cpu")
    selector_module._loaded.clear()


def test_a_model_file_from_before_device_kinds_is_a_cpu_model(tmp_path):
    data = _two_format_selector().to_dict()
    del data["device"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert Selector.load(tmp_path / "old.json").device == "cpu"


def test_without_a_model_auto_times_every_usable_format_where_it_can_pay(monkeypatch):
    monkeypatch.setitem(selector_module.SHIPPED_MODELS, "cpu", selector_module.SHIPPED_MODEL.with_name("absent.json"))
    assert model_path("cpu") is None and current_selector("cpu") is None
    timed = []

    def timer(adj, width, names, repeats, dtype=torch.float32):
        timed.append(list(names))
        return {n: FormatTiming(0.0, 0.1 if n == "segment" else 1.0, repeats) for n in names}

    monkeypatch.setattr(decision, "_timer", timer)
    spec = MatrixSpec("rmat", 3000, 3000, 6, 0)
    adj, one_off = spec.build(), spec.build()
    one_off.single_use = True
    made = decision.decide(adj, 32)
    assert made.choice == "segment" and made.checked and made.model is None and made.device == "cpu"
    assert "no selector model for cpu" in made.reason and "--device cpu" in made.reason
    assert set(timed[0]) == {n for n in FORMATS if selector_module.usable(FORMATS[n], adj)} and len(timed[0]) > 2
    assert timed[1] == [selector_module.NO_MODEL_DEFAULT, "segment"]  # the switch, timed again
    kept = decision.decide(one_off, 32)  # one product cannot repay timing: the default
    assert kept.choice == selector_module.NO_MODEL_DEFAULT and not kept.checked and len(timed) == 2
    assert "single-use matrix" in kept.reason
    shared = decision.decide(one_off, 32, run=decision.RunLength(1), shared=True)  # serves its size class
    assert shared.choice == "segment" and shared.checked and len(timed) == 4
    # each step's block converts anew: its conversion counts in full, however long the run
    monkeypatch.setattr(decision, "_timer", lambda a, w, names, r, **_: {
        n: FormatTiming(1.0 if n == "csr" else 0.0, {"csr": 0.6, "segment": 0.9}.get(n, 1.0), r) for n in names})
    assert decision.decide(one_off, 32, run=decision.RunLength(100), shared=True).choice == "segment"
    assert decision.decide(adj, 32, run=decision.RunLength(100)).choice == "csr"  # amortised over the run
    monkeypatch.setattr(decision, "_timer", timer)
    assert set(timed[2]) == {n for n in FORMATS if selector_module.usable(FORMATS[n], one_off)}
    assert all(FORMATS[n].conversion_free for n in timed[2]) and len(timed[2]) > 2
    monkeypatch.setattr(decision, "_backward_timer", lambda a, w, names, r, **_: {n: 1.0 for n in names})
    backward = decision.decide(one_off, 32, transpose=True, shared=True)  # a tie keeps the transpose-free one
    assert backward.choice == "gather_scatter" and backward.checked and "kept" in backward.reason
    monkeypatch.setattr(decision, "_backward_timer", lambda a, w, names, r, **_: {n: 0.5 if n == "segment" else 1.0
                                                                                for n in names})
    backward = decision.decide(one_off, 32, transpose=True, shared=True)
    assert backward.choice == "segment" and "A^T sorted where needed" in backward.reason
    monkeypatch.setattr(decision, "_backward_timer", lambda a, w, names, r, **_: {})  # no memory for any of them
    backward = decision.decide(one_off, 32, transpose=True, shared=True)
    assert backward.choice == "gather_scatter" and "could not time gather_scatter" in backward.reason
    assert decision.decide(adj, 32, verify=False).choice == "csr" and len(timed) == 4
    short = decision.decide(adj, 32, run=decision.RunLength(5))  # too few products to repay timing them all
    assert short.choice == "csr" and not short.checked and "a run of 5 products" in short.reason and len(timed) == 4

    monkeypatch.setattr(decision, "_timer", lambda a, w, names, r, **_: {n: FormatTiming(0.0, 1.0, r) for n in names})
    assert decision.decide(adj, 32).choice == "csr"  # a tie keeps the default


def test_without_a_model_a_single_use_matrixs_backward_needs_no_transpose(monkeypatch):
    """Building A^T of a sampled block costs a sort for one product: without a model, its backward
    takes a format that multiplies by A^T from A's entries (gather-scatter, PyG's backward), whose
    values and gradients are the default's; its forward keeps the default. Not on a GPU in
    deterministic mode, where that scatter-add sorts its indices instead."""
    monkeypatch.setitem(selector_module.SHIPPED_MODELS, "cpu", selector_module.SHIPPED_MODEL.with_name("absent.json"))
    block = MatrixSpec("rmat", 300, 300, 6, 0).build()
    block.single_use = True
    backward = decision.decide(block, 32, transpose=True)
    assert backward.choice == "gather_scatter" and FORMATS["gather_scatter"].transpose_free
    assert "single-use matrix" in backward.reason and not backward.checked
    assert decision.decide(block, 32).choice == selector_module.NO_MODEL_DEFAULT
    planned = plan(block, 32)
    assert (planned.forward, planned.backward) == ("csr", "gather_scatter")
    x = torch.randn(300, 32, requires_grad=True)
    ours, = torch.autograd.grad(spmm(block, x, reduce="mean").square().sum(), x)
    ref, = torch.autograd.grad(spmm(block, x, reduce="mean", format="csr").square().sum(), x)
    torch.testing.assert_close(ours, ref)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    monkeypatch.setattr(type(block), "device", property(lambda self: torch.device("cuda", 0)))
    assert decision._transpose_free(block, ["csr", "gather_scatter"]) is None


def test_decision_names_the_model_that_spoke():
    made = decision.decide(MatrixSpec("rmat", 500, 500, 4, 0).build(), 16, verify=False)
    assert made.device == "cpu" and made.model == str(SHIPPED_MODEL)


def test_labels_of_one_device_kind_make_one_model(tmp_path):
    specs = sample_specs(2, seed=5, min_rows=200, max_rows=400)
    path = tmp_path / "labels.jsonl"
    records = label_corpus(specs, path, widths_per_matrix=1, repeats=1)
    assert records_device(records) == "cpu" and all(r["device"] == "cpu" for r in records)
    assert records_device([{"times": {}}]) == "cpu"  # labels from before device kinds
    gpu = [dict(r, device="cuda", device_name="Some GPU") for r in records]
    with pytest.raises(ValueError, match="several device kinds"):
        records_device(records + gpu)
    path.write_text("".join(json.dumps(r) + "\n" for r in gpu))
    with pytest.raises(ValueError, match="labels measured on cuda, not cpu"):
        label_corpus(specs, path, widths_per_matrix=1, repeats=1)
    pytest.importorskip("sklearn")
    model = fit_selector(gpu * 3, n_trees=2)
    assert model.device == "cuda" and model.meta["device_names"] == ["Some GPU"]


def test_a_gpu_model_reads_no_host_thread_count():
    """``threads`` is the CPU's intra-op thread count for a CPU model and 0 for a GPU one, whose
    products it does not drive: a model labelled on a 16-core GPU machine reads the same input on
    a 4-core one. The calibration records write it the same way."""
    from gnnkit.sparse.features import threads_feature

    formats = ["csr", "segment"]
    tree = stump(FEATURE_NAMES.index("threads"), 0.5, [0.0, 1.0], [1.0, 0.0])  # csr at 0 threads, segment above
    adj = MatrixSpec("erdos_renyi", 50, 50, 4, 0).build()
    gpu = Selector(TreeEnsemble([tree], len(FEATURE_NAMES), 2), formats, device="cuda")
    cpu = Selector(gpu.ensemble, formats, device="cpu")
    assert {gpu.select(adj, 16, threads=t) for t in (1, 4, 16)} == {"csr"}
    assert cpu.select(adj, 16, threads=4) == "segment"
    assert threads_feature("cuda", 16) == 0 and threads_feature("cpu", 3) == 3
    assert threads_feature("cpu") == torch.get_num_threads()
