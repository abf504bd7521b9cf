"""FedMUD's presets cannot rot: the paper-scale preset (CIFAR-10, CNN-10 at 1/32) runs on a small
generated CIFAR-10 pickle fixture, and every one of its entries builds at the paper's ratio."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from flwr_strategies.simulations import compare
from flwr_strategies.simulations.compare import merge_config, run_entries
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.presets import PresetContext, get_preset


@pytest.fixture(scope="module")
def cifar10_dir(tmp_path_factory):
    """A CIFAR-10 python-pickle folder with 8 random images per batch file (48 in all)."""
    root = tmp_path_factory.mktemp("cifar")
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 255, (8, 3072), dtype=np.uint8),
                         "labels": [int(v) for v in rng.integers(0, 10, 8)]}, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [str(i) for i in range(10)]}, fh)
    return root


SMALL = {"num_clients": 2, "fraction_fit": 1.0, "partition": "iid", "rounds": 1, "local_epochs": 1, "progress": False}


def test_paper_scale_preset_is_the_papers_setting():
    p = get_preset("fedmud-paper")
    assert {k: p.base[k] for k in ("dataset", "model", "num_clients", "fraction_fit", "rounds", "local_epochs",
                                   "batch_size", "partition", "alpha")} == {
        "dataset": "cifar10", "model": "cnn_cifar", "num_clients": 100, "fraction_fit": 0.1, "rounds": 200,
        "local_epochs": 3, "batch_size": 64, "partition": "dirichlet-class", "alpha": 0.3}
    labels = [e.label for e in p.entries]
    assert labels[0] == "FedAvg" and labels[-1] == "FedMUD+BKD+AAD" and len(labels) == 10


def test_paper_scale_preset_runs_on_a_cifar_fixture(cifar10_dir, tmp_path):
    preset = get_preset("fedmud-paper")
    entries = [e for e in preset.entries if e.label == "FedMUD+BKD+AAD"]
    (result,) = run_entries(entries, preset.base, {**SMALL, "data_dir": str(cifar10_dir)}, tmp_path, title="fixture")
    assert len(result["rounds"]) == 2 and result["rounds"][1]["accuracy"] is not None  # round 0 and 1, evaluated
    mud = result["rounds"][1]
    assert mud["fit_ratio"] == pytest.approx(0.03221, abs=1e-5)  # spec 9.4: CIFAR-10 CNN-10 kron/AAD at 1/32
    exp = get_experiment(ExperimentConfig.from_dict(result["config"]))
    model_bytes = sum(a.nbytes for a in exp.initial_parameters)  # what FedAvg would send each client
    assert mud["bytes_up"] * 25 < SMALL["num_clients"] * model_bytes  # factors, not the model, on the wire
    assert (tmp_path / "summary.md").exists()


def test_every_paper_scale_entry_builds_at_one_thirty_second(cifar10_dir):
    preset = get_preset("fedmud-paper")
    for entry in preset.entries[1:]:
        conf = merge_config(preset.base, {"method": entry.method}, entry.overrides, {**SMALL, "data_dir": str(cifar10_dir)})
        exp = get_experiment(ExperimentConfig.from_dict(conf))
        core = exp.spec.build_core(exp.server_setup(), dict(exp.params))
        assert abs(core.plan.ratio - 1 / 32) < 0.002, (entry.label, core.plan.ratio)


@pytest.mark.parametrize("name", ["fedmud", "fedmud-code"])
def test_mnist_presets_pass_the_backend_on(name, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(compare, "run_entries", lambda entries, base, overrides, out, **kw: seen.append(overrides) or [])
    monkeypatch.setenv("FEDMUD_PRESET_PARTS", "IID")
    preset = get_preset(name)
    preset.custom(PresetContext(preset, {"data_dir": "unused", "backend": "ray"}, tmp_path))
    assert [o["backend"] for o in seen] == ["ray"]
