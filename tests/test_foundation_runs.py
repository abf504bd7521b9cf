"""End-to-end runs of the foundation on the in-process backend (and one real Ray run)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.runner import run_experiment


def _cfg(**kw):
    base = dict(method="fedavg", dataset="digits", num_clients=10, rounds=20, seed=0, progress=False)
    base.update(kw)
    return ExperimentConfig(**base)


def test_fedavg_digits_reaches_090_and_counts_bytes_exactly(tmp_path):
    res = run_experiment(_cfg(out=str(tmp_path)))
    assert res["summary"]["final_accuracy"] >= 0.90
    model_bytes = 55_210 * 4  # MLP 64-200-200-10 in float32
    for r in res["rounds"][1:]:
        assert r["bytes_up"] == r["clients"] * model_bytes == 10 * model_bytes
        assert r["bytes_down"] == 10 * model_bytes
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {"round", "accuracy", "loss", "bytes_up", "bytes_down", "wall_s"} <= set(saved["rounds"][1])
    assert saved["versions"]["flwr"] and saved["config"]["seed"] == 0


def test_same_seed_same_numbers_and_sampling_depends_on_seed():
    a = run_experiment(_cfg(rounds=4, fraction_fit=0.3))
    b = run_experiment(_cfg(rounds=4, fraction_fit=0.3))
    c = run_experiment(_cfg(rounds=4, fraction_fit=0.3, seed=1, data_seed=0))
    acc = lambda r: [x["accuracy"] for x in r["rounds"]]  # noqa: E731
    assert acc(a) == acc(b)
    assert acc(a) != acc(c)
    assert all(x["clients"] == 3 for x in a["rounds"][1:])


def test_failed_client_is_skipped_logged_and_counted():
    res = run_experiment(_cfg(rounds=3, fail=["2:3"]))
    per_round = {r["round"]: r for r in res["rounds"]}
    assert per_round[2]["failures"] == 1 and per_round[1]["failures"] == 0
    assert per_round[2]["bytes_up"] == 9 * 55_210 * 4
    assert res["summary"]["failures"] == 1
    assert "injected failure of partition 3" in res["failure_log"][0]["error"]
    assert per_round[3]["accuracy"] > per_round[1]["accuracy"]


def test_nonfinite_update_is_treated_as_failure():
    res = run_experiment(_cfg(rounds=1, lr=1e30))
    assert all(np.isfinite(r["loss"]) for r in res["rounds"])
    assert sum(r["nonfinite"] for r in res["rounds"][1:]) > 0
    # a second round in which every reply diverges stops the run, naming the cause (issue 19)
    from flwr_strategies.adapters import NoProgressError

    with pytest.raises(NoProgressError, match="NaN or infinite.*Lower the learning rate"):
        run_experiment(_cfg(rounds=2, lr=1e30))


def test_fedprox_and_fedadam_learn():
    for method in ("fedprox", "fedadam"):
        res = run_experiment(_cfg(method=method, rounds=10))
        assert res["summary"]["best_accuracy"] > 0.8, method


def test_mnist_round_bytes(mnist_path):
    res = run_experiment(
        _cfg(dataset="mnist", data_dir=str(mnist_path), num_clients=20, fraction_fit=0.2, rounds=1, local_steps=2)
    )
    from flwr_strategies.simulations.models import build_model

    model_bytes = sum(t.numel() * t.element_size() for t in build_model("cnn_mnist", 10, (1, 28, 28)).state_dict().values())
    assert res["rounds"][1]["bytes_up"] == 4 * model_bytes
    assert any("carved" in n for n in res["data_notes"])


def test_bad_input_errors():
    with pytest.raises(KeyError, match="valid methods: .*fedavg"):
        _cfg(method="fedsgd").validate()
    with pytest.raises(KeyError, match="no parameter 'mu'.*proximal_mu"):
        _cfg(method="fedprox", params={"mu": "0.1"}).validate()
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        _cfg(lr=0.0).validate()
    with pytest.raises(ValueError, match="fraction_fit"):
        _cfg(fraction_fit=1.5).validate()
    with pytest.raises(ValueError, match="bad failure spec"):
        _cfg(fail=["x"]).validate()


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "flwr_strategies.simulations", *args], capture_output=True, text=True, timeout=timeout)


def _cli_here(capsys, *args) -> subprocess.CompletedProcess:
    """``_cli`` in this process: what ``python -m flwr_strategies.simulations`` runs (``sys.exit(main(args))``),
    without the seconds a new interpreter takes to import torch and Flower."""
    from flwr_strategies.simulations.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as stop:  # argparse's errors
        code = stop.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out, err)


def test_cli_list_and_errors(tmp_path, capsys):
    out = _cli("list")  # the real entry point once
    assert out.returncode == 0
    for word in ("fedavg", "fedprox", "fedadam", "digits", "mnist", "quickstart"):
        assert word in out.stdout
    bad = _cli_here(capsys, "run", "--method", "nope", "--quiet")
    assert bad.returncode == 2 and "valid methods" in bad.stderr
    bad = _cli_here(capsys, "run", "--method", "fedprox", "--set", "mu=1", "--quiet")
    assert bad.returncode == 2 and "no parameter 'mu'" in bad.stderr
    bad = _cli_here(capsys, "run", "--method", "fedavg", "--dataset", "mnist", "--data-dir", str(tmp_path), "--quiet")
    assert bad.returncode == 2 and "t10k-images-idx3-ubyte" in bad.stderr
    bad = _cli_here(capsys, "compare", "--preset", "nope")
    assert bad.returncode == 2 and "valid presets" in bad.stderr


def test_cli_compare_writes_table_and_plot(tmp_path):
    out = _cli("compare", "--methods", "fedavg,fedprox", "--rounds", "3", "--quiet", "--target", "0.5", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "summary.md").read_text()
    assert "| fedavg |" in table and "| fedprox |" in table
    assert (tmp_path / "accuracy.png").stat().st_size > 1000
    assert (tmp_path / "fedavg" / "results.json").exists()


def test_gpu_flags_are_validated_and_reach_ray_resources(capsys):
    import torch

    from flwr_strategies.simulations.backends import federation_config

    cfg = _cfg(client_gpus=0.25, client_cpus=1.5)
    cfg.validate()
    fed = federation_config(cfg)  # `flwr run --federation-config`: whole CPUs per client
    assert (fed["num-supernodes"], fed["client-resources-num-cpus"], fed["client-resources-num-gpus"]) == (10, 2, 0.25)
    with pytest.raises(ValueError, match="client_gpus"):
        _cfg(client_gpus=-1).validate()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            _cfg(device="cuda").validate()
    out = _cli_here(capsys, "run", "--method", "fedavg", "--device", "cuda:0", "--client-gpus", "0.5", "--rounds", "1",
                    "--quiet")
    if not torch.cuda.is_available():
        assert out.returncode == 2 and "CUDA is not available" in out.stderr


def test_overhead_benchmark_paths_end_with_the_same_model():
    from flwr_strategies.simulations.bench import overhead

    assert overhead.main(["--num-clients", "5", "--rounds", "2", "--skip-ray", "--repeat", "1"]) == 0


def test_scale_benchmark_runs_a_stateful_method_with_client_state_in_contexts(tmp_path):
    from flwr_strategies.simulations.bench import scale

    out = tmp_path / "scale.json"
    assert scale.main(["--clients", "300", "--fraction", "0.05", "--rounds", "2", "--backends", "inprocess",
                       "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["federated"]
    assert row["method"] == "scaffold" and row["sampled_per_round"] == 15 and row["failures"] == 0
    # SCAFFOLD's control variates live in the sampled clients' context.state, nowhere else
    assert 15 <= row["contexts_with_state"] <= 30 and row["client_state_mb"] > 0
    assert row["peak_rss_tree_mb"] > 0
