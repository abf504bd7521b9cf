"""FedLi-LS, FedLi-LU, FedExP and SCAFFOLD give the same per-round numbers through Flower's legacy
API and the Message API, and a run checkpointed after round k and resumed ends where a straight run
ends (FedLi-LS on both APIs, FedLi-LU with DFW momentum, FedExP with its last-two average, SCAFFOLD
with the clients' control variates in context.state)."""

import os

import pytest
import torch

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
torch.set_num_threads(1)

from apiharness import assert_same_records, legacy_run, message_run  # noqa: E402

from flwr_strategies.core import load_state, save_state  # noqa: E402
from flwr_strategies.simulations.experiment import ExperimentConfig  # noqa: E402


def _cfg(method, params=None, rounds=3, **kw):
    base = dict(method=method, params=params or {}, dataset="digits", num_clients=4, fraction_fit=0.5, rounds=rounds,
                lr=0.05, partition="dirichlet", alpha=0.5, seed=2, progress=False)
    base.update(kw)
    return ExperimentConfig(**base)


@pytest.mark.parametrize(
    "method,params",
    [
        ("fedli-ls", {}),
        ("fedli-ls", {"variant": "code", "step_size_sync": "max"}),
        ("fedli-lu", {}),
        ("fedexp", {}),
        ("fedexp", {"variant": "code"}),
        ("scaffold", {}),
        ("scaffold", {"control_state": "server"}),
    ],
)
def test_same_numbers_through_both_apis(method, params):
    a, strategy, _ = legacy_run(_cfg(method, params))
    b, _, _ = message_run(_cfg(method, params))
    assert_same_records(a, b)
    assert a[-1][2] > a[0][2] + 0.1  # and it learned


@pytest.mark.parametrize("api", ["legacy", "message"])
def test_fedli_ls_resume_equals_straight_run(tmp_path, api):
    run = legacy_run if api == "legacy" else message_run
    cfg = _cfg("fedli-ls", rounds=4)
    full, _, _ = run(cfg)
    first, strategy, clients = run(cfg, rounds=2)
    state = load_state(save_state(tmp_path / "ck.npz", strategy.state_dict()))
    rest, _, _ = run(cfg, state=state, clients=clients)
    assert first == full[:3]
    assert rest[-1] == full[-1]


@pytest.mark.parametrize(
    "method,params",
    [("fedli-lu", {"variant": "code"}), ("fedexp", {"variant": "code"}), ("scaffold", {})],
)
def test_stateful_methods_resume_equals_straight_run(tmp_path, method, params):
    cfg = _cfg(method, params, rounds=4)
    full, _, _ = message_run(cfg)
    _, strategy, grid = message_run(cfg, rounds=2)
    state = load_state(save_state(tmp_path / "ck.npz", strategy.state_dict()))
    assert state["method"].keys() >= {"current"}
    rest, _, _ = message_run(cfg, state=state, clients=grid)  # SCAFFOLD: c_i stay in the nodes' context.state
    assert rest[-1] == full[-1]
