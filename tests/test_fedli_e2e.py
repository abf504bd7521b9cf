"""End-to-end runs of fedli-ls / fedli-lu / fedexp / scaffold through the foundation runner, the SCAFFOLD
client's persistent state, and inprocess-vs-ray equality (one small Ray run)."""

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
torch.set_num_threads(1)

from flwr.common import RecordDict  # noqa: E402

from flwr_strategies.clients.fedli import STATE_KEY, ArmijoSGDClient, ScaffoldClient  # noqa: E402
from flwr_strategies.clients.training import TensorData, get_weights  # noqa: E402
from flwr_strategies.fedli import ArmijoConfig  # noqa: E402
from flwr_strategies.setup import ClientSetup, TrainConfig  # noqa: E402
from flwr_strategies.simulations.experiment import ExperimentConfig  # noqa: E402
from flwr_strategies.simulations.runner import run_experiment  # noqa: E402


def _cfg(method, **kw):
    base = dict(method=method, dataset="digits", num_clients=6, fraction_fit=0.5, rounds=3, lr=0.05,
                partition="dirichlet", alpha=0.5, seed=1, progress=False)
    base.update(kw)
    return ExperimentConfig(**base)


@pytest.mark.parametrize("method", ["fedli-ls", "fedli-lu", "fedexp", "scaffold"])
def test_short_run_learns(method):
    res = run_experiment(_cfg(method, lr=0.1 if method != "fedli-lu" else 0.05))
    accs = [r["accuracy"] for r in res["rounds"]]
    assert accs[0] < 0.2  # untrained 10-class model
    assert max(accs[1:]) > accs[0] + 0.15
    last = res["rounds"][-1]
    key = {"fedli-ls": "fit_eta_g", "fedli-lu": "fit_gamma", "fedexp": "fit_eta_g", "scaffold": "fit_control_norm"}[method]
    assert key in last and np.isfinite(last[key])
    if method == "fedli-lu":
        assert 0.0 <= last["fit_gamma"] <= 1.0
    if method == "fedexp":
        assert last["fit_eta_g"] >= 1.0


def _setup(state=None, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return ClientSetup(partition_id=3, num_partitions=5, model=model, train_data=TensorData(x, y), test_data=None,
                       train=TrainConfig(lr=0.1, local_epochs=1, batch_size=16), device=torch.device("cpu"), seed=7,
                       state=state)


def test_armijo_client_reports_step_and_respects_config():
    client = ArmijoSGDClient(_setup(), {})
    w0 = get_weights(client.model)
    cfg = {"server-round": 1, "local_epochs": 1, "batch_size": 16, "seed": 7, "eta_max": 0.5, "armijo_c": 0.2}
    w1, n, m = client.fit(w0, cfg)
    assert n == 64 and m["partition-id"] == 3 and m["steps"] == 4
    assert 0 < m["step_size"] <= 0.5
    w2, _, m2 = ArmijoSGDClient(_setup(), {}).fit(w0, cfg)  # deterministic given the seed
    assert m == m2 and all(np.array_equal(a, b) for a, b in zip(w1, w2))
    assert ArmijoConfig.from_mapping(cfg).armijo_c == 0.2


def test_scaffold_client_keeps_control_in_context_state():
    state = RecordDict()
    setup = _setup(state)
    client = ScaffoldClient(setup, {})
    w0 = get_weights(client.model)
    c0 = [np.zeros_like(a) for a in w0]
    cfg = {"server-round": 1, "lr": 0.1, "local_epochs": 1, "batch_size": 16, "seed": 7}
    out, n, m = client.fit(w0 + c0, cfg)
    L = len(w0)
    w1, dc1 = out[:L], out[L:]
    c1 = state[STATE_KEY].to_numpy_ndarrays()
    for j in range(L):  # option II with c = c_i = 0: c_i+ = (w_t - w_i) / (K lr)
        np.testing.assert_allclose(c1[j], (w0[j] - w1[j]) / (m["steps"] * 0.1), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(dc1[j], c1[j], rtol=1e-6)
    # a new client object for the same partition (as Flower builds per message) reads c_i back
    out2, _, _ = ScaffoldClient(_setup(state), {}).fit(w0 + c0, {**cfg, "server-round": 2})
    c2 = state[STATE_KEY].to_numpy_ndarrays()
    for j in range(L):
        np.testing.assert_allclose(out2[L + j], c2[j] - c1[j], rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="context.state"):
        ScaffoldClient(_setup(None), {}).fit(w0 + c0, cfg)


def test_same_numbers_inprocess_and_ray():
    kw = dict(num_clients=4, fraction_fit=0.5, rounds=2, lr=0.1)
    a = run_experiment(_cfg("scaffold", backend="inprocess", **kw))
    b = run_experiment(_cfg("scaffold", backend="ray", **kw))
    keys = ("accuracy", "loss", "fit_train_loss", "fit_control_norm")
    ra = [[r.get(k) for k in keys] for r in a["rounds"]]
    rb = [[r.get(k) for k in keys] for r in b["rounds"]]
    assert ra == rb


def test_scaffold_server_held_controls_give_same_numbers():
    kw = dict(num_clients=4, fraction_fit=0.5, rounds=3, lr=0.1)
    a = run_experiment(_cfg("scaffold", **kw))
    b = run_experiment(_cfg("scaffold", params={"control_state": "server"}, **kw))
    keys = ("accuracy", "loss", "fit_train_loss", "fit_control_norm")
    assert [[r.get(k) for k in keys] for r in a["rounds"]] == [[r.get(k) for k in keys] for r in b["rounds"]]
    assert b["rounds"][-1]["bytes_down"] > a["rounds"][-1]["bytes_down"]  # c_i travels down in server mode
