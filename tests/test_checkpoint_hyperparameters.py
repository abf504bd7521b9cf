"""A strategy's checkpoint carries its method and hyperparameters: loading it under other
hyperparameters is refused naming each differing value (on both APIs, one method per family),
unless ``allow_changed`` names them, and then the change is kept and carried on."""

from __future__ import annotations

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
import torch
from flwr.server.client_manager import SimpleClientManager

import flwr_strategies
import flwr_strategies.serverapp
from flwr_strategies import load_state, save_state


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)


def _net_arrays():
    torch.manual_seed(0)
    return [v.detach().numpy().copy() for v in Net().state_dict().values()]


def _lora_arrays():
    rng = np.random.default_rng(0)
    return {"base.weight": rng.normal(size=(4, 4)).astype(np.float32),
            "base.lora_A.weight": rng.normal(size=(2, 4)).astype(np.float32),
            "base.lora_B.weight": np.zeros((4, 2), np.float32)}


#: family: (class name, fixed arguments, initial model, the checkpoint's hyperparameters, other ones)
FAMILIES = {
    "fedavg-like": ("FedProx", {}, lambda: [np.zeros(3, np.float32)], {"proximal_mu": 0.1}, {"proximal_mu": 0.2}),
    "fedli": ("FedLiLS", {}, lambda: [np.zeros(3, np.float32)], {"armijo": {"armijo_c": 0.2}},
              {"armijo": {"armijo_c": 0.3}, "weighting": "uniform"}),
    "scaffold": ("Scaffold", {}, lambda: [np.zeros(3, np.float32)], {"server_lr": 1.0}, {"server_lr": 0.5}),
    "fedmud": ("FedMUD", {"model": Net(), "strict_ratio": False}, _net_arrays, {"init_scale": 2.0}, {"init_scale": 3.0}),
    "dfedcata": ("DFedCata", {"neighbours": 2}, lambda: [np.zeros(3, np.float32)], {"beta": 0.99, "lam": 0.05},
                 {"beta": 0.5, "lam": 0.2}),
    "doadp": ("DOADP", {"num_rounds": 5, "local_dataset_size": 100, "neighbours": 3},
              lambda: [np.zeros(3, np.float32)], {"epsilon": 1.0}, {"epsilon": 0.5}),
    "fedmezo": ("FedMeZO", {"num_rounds": 5}, _lora_arrays, {"lr": 1e-5}, {"lr": 2e-5}),
}
N = 4


class _Proxy:
    def __init__(self, pid):
        self.cid, self.pid = f"c{pid}", pid


def _started(name, fixed, initial, hyper):
    """The legacy strategy after configuring round 1 (its core is built), on N connected clients."""
    manager = SimpleClientManager()
    proxies = {p: _Proxy(p) for p in range(N)}
    for proxy in proxies.values():
        manager.register(proxy)
    s = getattr(flwr_strategies, name)(initial_parameters=initial(), min_available_clients=N, min_fit_clients=N,
                                        fraction_evaluate=0.0, partition_resolver=lambda m: proxies, **fixed, **hyper)
    s.configure_fit(1, s.initialize_parameters(manager), manager)
    return s


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_checkpoint_under_other_hyperparameters_is_refused_naming_them(family, tmp_path):
    name, fixed, initial, saved_with, other = FAMILIES[family]
    source = _started(name, fixed, initial, saved_with)
    state = load_state(save_state(tmp_path / "ck.npz", source.state_dict()))
    assert state["strategy"] == name and state["hyperparameters"] == source.hyperparameter_values()
    for api in (flwr_strategies, flwr_strategies.serverapp):
        cls = getattr(api, name)
        target = cls(**fixed, **other)
        with pytest.raises(ValueError, match=rf"^{name}: the checkpoint was taken under other hyperparameters") as err:
            target.load_state_dict(state)
        for key in other:
            assert f"{key}: checkpoint {state['hyperparameters'][key]!r}, this strategy " \
                   f"{target.hyperparameter_values()[key]!r}" in str(err.value)
        assert target._pending_state is None and target.changed_on_resume == []  # nothing changed
        cls(**fixed, **saved_with).load_state_dict(state)  # the same hyperparameters: accepted
        permitted = cls(**fixed, **other)
        permitted.load_state_dict(state, allow_changed=tuple(other))
        assert [c["setting"] for c in permitted.changed_on_resume] == sorted(other)
        assert all(c["checkpoint"] == state["hyperparameters"][c["setting"]]
                   and c["now"] == permitted.hyperparameter_values()[c["setting"]] for c in permitted.changed_on_resume)


def test_a_permitted_change_is_carried_by_later_checkpoints(tmp_path):
    name, fixed, initial, saved_with, other = FAMILIES["dfedcata"]
    state = load_state(save_state(tmp_path / "ck.npz", _started(name, fixed, initial, saved_with).state_dict()))
    manager = SimpleClientManager()
    proxies = {p: _Proxy(p) for p in range(N)}
    for proxy in proxies.values():
        manager.register(proxy)
    resumed = flwr_strategies.DFedCata(initial_parameters=initial(), min_available_clients=N, min_fit_clients=N,
                                       fraction_evaluate=0.0, partition_resolver=lambda m: proxies, **fixed, **other)
    resumed.load_state_dict(state, allow_changed=("beta", "lam"))
    resumed.configure_fit(1, resumed.initialize_parameters(manager), manager)
    assert resumed.core.config.beta == 0.5  # the run goes on with the new values
    again = resumed.state_dict()
    assert [(c["setting"], c["checkpoint"], c["now"]) for c in again["changed_on_resume"]] == [
        ("beta", 0.99, 0.5), ("lam", 0.05, 0.2)]
    with pytest.raises(ValueError, match=r"beta: checkpoint 0.5, this strategy 0.99"):
        flwr_strategies.serverapp.DFedCata(**fixed, **saved_with).load_state_dict(again, allow_changed=("lam",))


def test_other_checkpoints_are_refused_naming_why(tmp_path):
    name, fixed, initial, saved_with, _ = FAMILIES["dfedcata"]
    source = _started(name, fixed, initial, saved_with)
    state = source.state_dict()
    with pytest.raises(ValueError, match=r"^DFedAvg: checkpoint is from DFedCata, not DFedAvg"):
        flwr_strategies.DFedAvg(neighbours=2).load_state_dict(state)
    with pytest.raises(ValueError, match=r"^DFedCata: allow_changed names \['bta'\], which are not its hyperparameters"):
        flwr_strategies.DFedCata(**fixed).load_state_dict(state, allow_changed=("bta",))
    with pytest.raises(ValueError, match=r"^DFedCata: checkpoint lacks 'strategy', 'hyperparameters'"):
        flwr_strategies.DFedCata(**fixed).load_state_dict(source.core.state_dict())
