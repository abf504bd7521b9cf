"""End-to-end FedMUD runs through the foundation's runner: the bytes actually sent per round by
FedMUD+BKD+AAD are at most 1/30 of FedAvg's (uplink and downlink), and the model learns."""

import json
import os

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

from flwr_strategies.simulations.experiment import ExperimentConfig  # noqa: E402
from flwr_strategies.simulations.runner import run_experiment  # noqa: E402

from conftest import mnist_dir  # noqa: E402

MNIST = str(mnist_dir())


def _cfg(method, out, rounds, **params):
    return ExperimentConfig(method=method, dataset="mnist", data_dir=MNIST, model="cnn_mnist", num_clients=3,
                            fraction_fit=1.0, rounds=rounds, local_steps=4, batch_size=32, lr=0.03 if method == "fedavg" else 0.01,
                            partition="iid", seed=0, params=params, out=str(out), progress=False)


def test_bytes_per_round_at_most_one_thirtieth_of_fedavg(tmp_path):
    from flwr_strategies.simulations.experiment import get_experiment

    fedmud = run_experiment(_cfg("fedmud", tmp_path / "fedmud", 2))
    saved = json.loads((tmp_path / "fedmud" / "results.json").read_text())
    assert saved["params"]["decomp"] == "kron" and saved["params"]["pattern"] == "aad"
    # FedAvg sends every client the whole model each way (1,567,392 B for CNN-4)
    fedavg_round = 3 * sum(a.nbytes for a in get_experiment(_cfg("fedmud", tmp_path, 2)).initial_parameters)
    assert fedavg_round == 3 * 1_567_392
    for rec in saved["rounds"][1:]:
        assert rec["bytes_up"] * 30 <= fedavg_round
        assert rec["bytes_down"] * 30 <= fedavg_round
        # exactly the planned payload (+ BN statistics) per client, nothing else
        assert rec["bytes_up"] == rec["bytes_down"] == 3 * 4 * (rec["fit_payload_scalars"])
        assert rec["fit_ratio"] == pytest.approx(0.03072, abs=1e-5)
    acc = [r["accuracy"] for r in fedmud["rounds"]]
    assert acc[-1] > acc[0] + 0.15, acc


def test_registry_and_bad_input():
    from flwr_strategies.fedmud.strategy import FedMUD
    from flwr_strategies.registry import get_method
    from flwr_strategies.simulations.models import build_model

    names = ["fedmud", "fedmud_mat", "fedmud_f", "fedmud_aad", "fedmud_bkd", "fedmud_bkd_f", "fedmud_bkd_aad",
             "fedlmt", "fedpara", "fedhm"]
    for n in names:
        get_method(n)
    opts = get_method("fedmud").configs({"decomp": "mat", "pattern": "ab", "reset_interval": 4})["config"]
    assert (opts.decomp, opts.pattern, opts.reset_interval) == ("mat", "ab", 4)
    assert get_method("fedlmt").configs({})["config"].reset_interval is None
    svhn = build_model("cnn_svhn", 10, (3, 32, 32))
    init = [v.numpy() for v in svhn.state_dict().values()]
    with pytest.raises(ValueError, match=r"smallest reachable whole-model ratio is 0\.03528.*strict_ratio=False"):
        FedMUD(model=svhn, initial_parameters=init)
    relaxed = FedMUD(model=svhn, initial_parameters=init, strict_ratio=False)  # the reference code's floor
    assert relaxed.core.plan.ratio == pytest.approx(0.03528, abs=1e-5)
    with pytest.raises(ValueError, match="target_ratio must be in"):
        get_method("fedmud").configs({"target_ratio": 1.5})
    with pytest.raises(ValueError, match="reset_interval must be an integer"):
        get_method("fedmud").configs({"reset_interval": -2})


def test_foundation_models_match_spec_counts():
    from fedmud_testmodels import PAPER_MODELS
    from flwr_strategies.fedmud import plan_model
    from flwr_strategies.simulations.models import build_model

    pairs = {"fmnist": ("cnn_mnist", 10, (1, 28, 28)), "svhn": ("cnn_svhn", 10, (3, 32, 32)),
             "cifar10": ("cnn_cifar", 10, (3, 32, 32)), "cifar100": ("cnn_cifar", 100, (3, 32, 32))}
    for key, (name, c, shape) in pairs.items():
        ours, theirs = PAPER_MODELS[key](), build_model(name, c, shape)
        for decomp in ("mat", "kron"):
            a = plan_model(ours, decomp, "aad", strict=False)
            b = plan_model(theirs, decomp, "aad", strict=False)
            assert (a.p_dense, a.p_payload, a.rho_layer) == (b.p_dense, b.p_payload, b.rho_layer), key
