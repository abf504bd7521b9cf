"""Issue 14 for DFedCata's family: paper defaults (train_defaults with provenance), every method learns
with ``python -m simulations run --method M --rounds 5`` on the default dataset, the paper-scale presets
run on small generated CIFAR pickles, the official-configuration preset runs; the server benchmark's
paths run."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from flwr_strategies.registry import PROVENANCES, get_method
from flwr_strategies.simulations.settings import source_kind
from flwr_strategies.simulations.compare import run_preset
from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.presets import get_preset
from flwr_strategies.simulations.runner import run_experiment

METHODS = ("dfedcata", "dfedavg", "dfedavgm", "dfedsam", "dpsgd", "fedsam")


def test_train_defaults_are_the_papers_with_provenance():
    for name in METHODS:
        d = {k: (v, source_kind(src)) for k, (v, src) in get_method(name).train_defaults.items()}
        assert d["lr"] == (0.1, "paper") and d["lr_decay"] == (0.998, "paper")
        assert d["local_epochs"] == (5, "paper") and d["num_clients"] == (100, "paper")
        assert d["weight_decay"] == (5e-4, "official code") and d["grad_clip"] == (10.0, "official code")
        assert d["batch_size"] == (128, "official code") and d["momentum"] == (0.0, "official code")
        assert all(prov in PROVENANCES for _, prov in d.values())
        fields = set(ExperimentConfig.__dataclass_fields__)
        assert set(d) <= fields, set(d) - fields
    assert get_method("fedsam").train_defaults["fraction_fit"][0] == 0.1
    assert get_method("dfedcata").train_defaults["fraction_fit"][0] == 1.0
    assert get_method("dfedcata").defaults["beta"] == 0.99 and get_method("dfedcata").defaults["lam"] == 0.05
    assert get_method("dfedavgm").defaults["local_momentum"] == 0.9 and get_method("dfedsam").defaults["rho"] == 0.1


@pytest.mark.parametrize("method", METHODS)
def test_run_method_for_five_rounds_learns_on_the_default_dataset(method):
    # what `python -m simulations run --method M --rounds 5` runs (default dataset: digits)
    res = run_experiment(ExperimentConfig(method=method, rounds=5, progress=False))
    acc = [r["accuracy"] for r in res["rounds"] if r.get("accuracy") is not None]
    assert acc[-1] > acc[0] + 0.1, acc


# ------------------------------------------------------------------ paper scale on fixtures
def _cifar(tmp_path, name: str, n_train: int, n_test: int):
    rng = np.random.default_rng(0)
    folder = tmp_path / ("cifar-10-batches-py" if name == "cifar10" else "cifar-100-python")
    folder.mkdir(parents=True)
    key = "labels" if name == "cifar10" else "fine_labels"
    classes = 10 if name == "cifar10" else 100
    files = ([f"data_batch_{i}" for i in range(1, 6)] if name == "cifar10" else ["train"])
    per = n_train // len(files)
    for f in files + ["test_batch" if name == "cifar10" else "test"]:
        n = n_test if f.startswith("test") else per
        with open(folder / f, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 255, (n, 3072), dtype=np.uint8),
                         key: [int(v) for v in rng.integers(0, classes, n)]}, fh)
    with open(folder / ("batches.meta" if name == "cifar10" else "meta"), "wb") as fh:
        pickle.dump({"label_names" if name == "cifar10" else "fine_label_names": [str(i) for i in range(classes)]}, fh)
    return tmp_path


@pytest.mark.parametrize("preset,dataset,over,only", [
    ("dfedcata-paper", "cifar10", {"num_clients": 3, "rounds": 1, "local_epochs": 2}, None),
    # ResNet-18-GN on CPU: the preset's own base settings, DFedCata's entry only, one round
    ("dfedcata-paper-c100", "cifar100", {"num_clients": 2, "rounds": 1, "local_epochs": 1}, "DFedCata"),
])
def test_paper_scale_preset_runs_on_generated_cifar(tmp_path, preset, dataset, over, only):
    import dataclasses

    p = get_preset(preset)
    assert p.base["num_clients"] == 100 and p.base["dataset"] == dataset
    assert p.base["rounds"] == (500 if dataset == "cifar10" else 200)
    assert p.base["local_epochs"] == (5 if dataset == "cifar10" else 2)
    labels = ["DFedAvg", "DFedAvgM", "DFedSAM", "D-PSGD", "DFedCata", "FedSAM"]
    assert [e.label for e in p.entries] == labels
    if only:
        p = dataclasses.replace(p, entries=[e for e in p.entries if e.label == only])
        labels = [only]
    data = _cifar(tmp_path / "data", dataset, n_train=30, n_test=10)
    results = run_preset(p, {"data_dir": str(data), "progress": False, **over}, tmp_path / "out")
    assert [r["label"] for r in results] == labels
    for r in results:
        assert r["config"]["model"] == p.base["model"] and r["config"]["batch_size"] == 128
        assert len([x for x in r["rounds"] if x["round"] > 0]) == over["rounds"]
        assert all(np.isfinite(x["loss"]) for x in r["rounds"])
    assert (tmp_path / "out" / "summary.md").exists()


def test_official_configuration_preset_runs(tmp_path):
    from flwr_strategies.dfedcata.config import CODE_OPTIONS

    p = get_preset("dfedcata-code")
    assert p.entries[1].overrides["params"] == CODE_OPTIONS
    results = run_preset(p, {"rounds": 2, "num_clients": 4, "local_epochs": 1, "progress": False}, tmp_path)
    seq = results[1]
    assert [x["round"] for x in seq["rounds"] if x.get("accuracy") is not None] == [0, 4, 8]  # 2 algorithm rounds
    assert "algorithm rounds" in (tmp_path / "summary.md").read_text()


# ------------------------------------------------------------------ the server benchmark's code paths
@pytest.mark.parametrize("method,through", [("dfedcata", "core"), ("dpsgd", "core"), ("dfedcata", "legacy")])
def test_memory_benchmark_paths_run(method, through):
    from flwr_strategies.simulations.bench.decentralized import measure_memory

    res = measure_memory(6, 5000, "random", 2, method, "float32", through=through)
    assert res["tables_held"] == (3 if method == "dfedcata" else 2) and res["peak_rss_bytes"] > 0
    assert res["links_per_round"] > 0 and len(res["wall_s_rounds"]) == 2
    json.dumps(res)
