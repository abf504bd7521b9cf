"""Issue 14 for FedLi: the paper's training settings as each method's defaults (and they learn on the
default dataset in 5 rounds), the official FedExP step-size rule as an option, FedLi-LU's measured
degeneracy (gamma clipped at 1), and the clients honouring every TrainConfig field."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
torch.set_num_threads(1)

from flwr_strategies.clients.fedli import LossReportingSGDClient, SGDClient  # noqa: E402
from flwr_strategies.clients.training import TensorData, get_weights  # noqa: E402
from flwr_strategies.core import Reply  # noqa: E402
from flwr_strategies.fedli import FedExPConfig, FedExPServer  # noqa: E402
from flwr_strategies.registry import get_method  # noqa: E402
from flwr_strategies.setup import ClientSetup, TrainConfig  # noqa: E402
from flwr_strategies.simulations.experiment import ExperimentConfig  # noqa: E402
from flwr_strategies.simulations.runner import run_experiment  # noqa: E402
from flwr_strategies.simulations.settings import source_kind  # noqa: E402

METHODS = ("fedli-ls", "fedli-lu", "fedexp", "scaffold")


def paper_config(method: str, **kw) -> ExperimentConfig:
    """``python -m simulations run --method M`` (the method's train_defaults apply)."""
    return ExperimentConfig(method=method, progress=False, **kw)


def _default(cfg: ExperimentConfig, name: str) -> tuple:
    return getattr(cfg, name), source_kind(cfg.provenance[name]["source"])


def test_train_defaults_are_the_papers_with_provenance():
    for method in METHODS:
        cfg = ExperimentConfig(method=method, dataset="mnist").resolve()
        assert _default(cfg, "local_epochs") == (1, "paper") and _default(cfg, "batch_size") == (32, "paper")
        assert _default(cfg, "fraction_fit") == (0.1, "paper") and _default(cfg, "num_clients") == (100, "paper")
    for method in ("fedli-lu", "fedexp", "scaffold"):
        cfg = ExperimentConfig(method=method).resolve()
        assert _default(cfg, "lr") == (0.01, "paper")
        assert _default(cfg, "grad_clip") == (1.0, "project")  # App. C: clipping "used", no threshold given
    # never on Armijo clients
    assert _default(ExperimentConfig(method="fedli-ls").resolve(), "grad_clip") == (None, "project")
    assert "lr" not in get_method("fedli-ls").train_defaults  # the line search replaces it


@pytest.mark.parametrize("method", METHODS)
def test_paper_defaults_learn_in_five_rounds_on_digits(method):
    res = run_experiment(paper_config(method, rounds=5))
    acc = [r["accuracy"] for r in res["rounds"]]
    assert acc[-1] > acc[0] + 0.05, acc


def test_fedli_lu_gamma_is_clipped_at_one_at_paper_defaults():
    """The documented degeneracy: f / (eta ||Delta||^2) far above 1, so gamma = 1 every round."""
    res = run_experiment(paper_config("fedli-lu", rounds=5, fraction_fit=0.3))
    rounds = [r for r in res["rounds"] if r["round"] > 0]
    assert all(r["fit_gamma"] == 1.0 for r in rounds)
    assert min(r["fit_polyak_ratio"] for r in rounds) > 10


def _fedexp_inputs(s=10, seed=3):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(50).astype(np.float64)]
    common = 0.003 * rng.standard_normal(50)
    replies = [Reply(i, [init[0] - common - 0.03 * rng.standard_normal(50)], int(n), {})
               for i, n in enumerate(rng.integers(5, 60, size=s))]
    return init, replies


def test_fedexp_code_option_pins_the_official_rule():
    """Official code: eta_g = max(1, 0.5 sum p_i ||D_i||^2 / (||sum p_i D_i||^2 + S eps 0.998^(2t))), p_i ~ n_i."""
    init, replies = _fedexp_inputs()
    s, eps, rnd = len(replies), 1e-3, 3
    deltas = [init[0] - r.arrays[0] for r in replies]
    p = np.array([r.num_examples for r in replies], float)
    p /= p.sum()
    dbar = sum(pi * d for pi, d in zip(p, deltas))
    code_eta = max(1.0, 0.5 * sum(pi * d @ d for pi, d in zip(p, deltas)) / (dbar @ dbar + s * eps * 0.998 ** (2 * rnd)))
    ubar = np.mean(deltas, axis=0)
    paper_eta = max(1.0, sum(d @ d for d in deltas) / (2 * s * (ubar @ ubar + eps)))

    def run(config):
        core = FedExPServer(init, config=config, num_partitions=s)
        m = core.train_round(rnd, replies, sampled=list(range(s)))
        return m, core

    m_code, core = run(FedExPConfig.code(eps))
    assert code_eta > 1.0  # the formula, not the max(1, .) floor, is what is compared
    assert m_code["eta_g"] == pytest.approx(code_eta, rel=1e-12)
    assert m_code["eps"] == pytest.approx(s * eps * 0.998 ** (2 * rnd), rel=1e-12)
    np.testing.assert_allclose(core.global_arrays()[0], init[0] - code_eta * dbar, rtol=1e-12)
    m_paper, _ = run(FedExPConfig(eps=eps))
    assert m_paper["eta_g"] == pytest.approx(paper_eta, rel=1e-12)
    assert m_paper["eta_g"] > 2 * m_code["eta_g"]  # S*eps damps the extrapolation, as the issue measured


def test_fedexp_code_evaluates_the_average_of_the_last_two_models():
    init, replies = _fedexp_inputs()
    core = FedExPServer(init, config=FedExPConfig.code(), num_partitions=10)
    seen = []

    def evaluate(rnd, arrays):
        seen.append(arrays[0].copy())
        return 0.0, {}

    core.train_round(1, replies, sampled=list(range(10)))
    w1 = core.global_arrays()[0].copy()
    core.evaluate(1, evaluate)
    core.train_round(2, replies, sampled=list(range(10)))
    core.evaluate(2, evaluate)
    np.testing.assert_array_equal(seen[0], w1)  # after round 1: one model only (the code's t = 0)
    np.testing.assert_allclose(seen[1], (w1 + core.global_arrays()[0]) / 2, rtol=1e-15)


def _client(cls, **train):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(48, 8, generator=g), torch.randint(0, 3, (48,), generator=g)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    setup = ClientSetup(partition_id=0, num_partitions=2, model=model, train_data=TensorData(x, y), test_data=None,
                        train=TrainConfig(**{"lr": 0.1, "local_epochs": 1, "batch_size": 48, **train}),
                        device=torch.device("cpu"), seed=0)
    return cls(setup, {}), x, y


@pytest.mark.parametrize("cls", [SGDClient, LossReportingSGDClient])
def test_sgd_clients_honour_momentum_weight_decay_clip_and_round_lr(cls):
    client, x, y = _client(cls, momentum=0.9, weight_decay=1e-3, grad_clip=0.5)
    w0 = get_weights(client.model)
    w, _, m = client.fit(w0, {"server-round": 1, "lr": 0.07, "local_epochs": 3, "batch_size": 48, "seed": 0})
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(ref.parameters(), lr=0.07, momentum=0.9, weight_decay=1e-3)
    for _ in range(3):  # one full batch per epoch: the shuffle does not change the batch
        opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        opt.step()
    assert m["steps"] == 3
    for a, b in zip(w, get_weights(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
