"""FedLi presets run: ``fedli-paper`` (the paper's CIFAR-10 ResNet-18-GN setting, 100 clients, 10 per
round) for one round on a generated CIFAR-10 fixture, ``fedli-code`` for one round on digits, and the
quickstart compares methods that each show their own behaviour."""

import json
import os
import pickle

import numpy as np
import torch

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
torch.set_num_threads(1)

from flwr_strategies.simulations.compare import run_preset  # noqa: E402
from flwr_strategies.simulations.presets import get_preset  # noqa: E402


def _cifar10_fixture(root, per_batch=40, test=20):
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", test)]:
        with open(folder / name, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 255, (n, 3072), dtype=np.uint8), "labels": list(rng.integers(0, 10, n))}, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [str(i) for i in range(10)]}, fh)
    return root


def test_paper_preset_runs_one_round_on_a_cifar_fixture(tmp_path):
    preset = get_preset("fedli-paper")
    base = preset.base
    assert (base["dataset"], base["model"], base["num_clients"], base["fraction_fit"]) == ("cifar10", "resnet18_gn", 100, 0.1)
    assert (base["partition"], base["alpha"], base["rounds"], base["batch_size"]) == ("dirichlet-class", 0.1, 500, 32)
    data = _cifar10_fixture(tmp_path / "data")
    # 200 fixture images cannot give 100 clients a Dir(0.1) per-class split: equal-size Dirichlet over 10
    # clients here (the paper's 10%: 1 per round), so that one round of ResNet-18 stays a few seconds on CPU
    summary = run_preset(preset, {"data_dir": str(data), "rounds": 1, "partition": "dirichlet", "num_clients": 10,
                                  "progress": False, "methods": "FedLi-LS"}, tmp_path / "out")
    assert [r["label"] for r in summary["runs"]] == ["FedLi-LS"]
    for label in ("FedLi-LS",):
        res = json.loads((tmp_path / "out" / label / "results.json").read_text())
        assert res["config"]["model"] == "resnet18_gn" and res["config"]["dataset"] == "cifar10"
        last = res["rounds"][-1]
        assert last["round"] == 1 and last["clients"] == 1 and last["failures"] == 0
        assert np.isfinite(last["loss"])
    text = (tmp_path / "out" / "summary.md").read_text()
    assert "| FedLi-LS |" in text and "75.5" in text  # the paper's Table 1 number beside ours


def test_code_preset_runs_paper_and_code_configurations(tmp_path):
    from flwr_strategies.simulations.presets.fedli import code_entries

    assert [e.label for e in code_entries()] == [f"{m} ({v})" for m in ("FedLi-LS", "FedLi-LU", "FedExP", "SCAFFOLD")
                                                 for v in ("paper", "code")]
    results = run_preset(get_preset("fedli-code"), {"rounds": 1, "progress": False, "methods": "fedli-ls,fedexp"}, tmp_path)
    assert [r["label"] for r in results] == ["FedLi-LS (paper)", "FedLi-LS (code)", "FedExP (paper)", "FedExP (code)"]
    by = {r["label"]: r for r in results}
    assert by["FedExP (code)"]["params"]["variant"] == "code" and by["FedExP (code)"]["config"]["local_steps"] == 20
    assert by["FedExP (code)"]["rounds"][-1]["fit_eps"] > by["FedExP (paper)"]["rounds"][-1]["fit_eps"]  # S * eps
    assert by["FedLi-LS (code)"]["rounds"][-1]["fit_steps"] == 20
    assert all(r["rounds"][-1]["failures"] == 0 for r in results)


def test_quickstart_compares_methods_with_their_own_behaviour():
    methods = [e.method for e in get_preset("quickstart").entries]
    assert "fedli-ls" in methods and "fedli-lu" not in methods  # FedLi-LU's curve lies on FedAvg's
