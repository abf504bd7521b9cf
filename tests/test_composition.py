"""The strategies compose with Flower's own wrappers: the model Flower passes back is the global model.

For every centralized method, in both Flower APIs, the strategy is wrapped in Flower's
``DifferentialPrivacyServerSideFixedClipping`` (and, once per method, ``...ClientSideFixedClipping``);
the arrays the clients receive in round 2 must be the wrapper's noisy output of round 1. A method
that cannot take a model changed from outside raises an error naming the situation instead, and a
method whose replies are not model updates (so Flower's server-side clipping cannot clip them)
fails inside Flower's wrapper in round 1, never silently.
"""

from __future__ import annotations

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.common import parameters_to_ndarrays
from flwr.server import Server
from flwr.server import strategy as legacy_wrappers
from flwr.serverapp import strategy as message_wrappers

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.core.server import ExternalModelError
from flwr_strategies.sampling import PartitionClientManager
from flwr_strategies.simulations.backends import InProcessClientProxy
from flwr_strategies.simulations.experiment import ClientFactory, ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

N = 3
#: Centralized methods whose clients receive and return the model itself.
MODEL = ["fedavg", "fedprox", "fedadam", "fedsam", "fedli-ls", "fedli-lu", "fedexp"]
#: Receives the model (and the control variate), replies with the model and its control-variate change.
SCAFFOLD = ["scaffold"]
#: Receive only the LoRA adapters; the frozen base never travels.
LORA = ["fedmezo", "lora-fedavg"]
#: The global model is rebuilt from low-rank factors: a changed model cannot reach the clients.
FACTORS = ["fedmud", "fedlmt", "fedpara", "fedhm"]
CENTRALIZED = MODEL + SCAFFOLD + LORA + FACTORS


def _cfg(method: str) -> ExperimentConfig:
    if method in LORA:
        return ExperimentConfig(method=method, num_clients=N, rounds=2, lr=2e-4, local_epochs=None, local_steps=2,
                                batch_size=1, fraction_fit=1.0, params={"n_examples": 30, "eval_every": 1},
                                progress=False)
    return ExperimentConfig(method=method, dataset="digits", num_clients=N, rounds=2, fraction_fit=1.0, lr=0.05,
                            local_epochs=1, batch_size=32, seed=1, progress=False)


def _payload(method: str, arrays: list[np.ndarray], n_model: int) -> list[np.ndarray]:
    """The part of what a client receives that is the global model (or its adapters)."""
    return arrays[:n_model] if method in SCAFFOLD else arrays


FIXED = {"noise_multiplier": 1.0, "clipping_norm": 5.0, "num_sampled_clients": N}


def _run_message(method: str, wrapper: type, dp: dict = FIXED):
    exp = get_experiment(_cfg(method))
    received: dict[tuple[int, int], list[np.ndarray]] = {}
    models: list = []

    def client_fn(context):
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    app = numpy_client_app(client_fn)

    def spy_app(msg, context):
        if msg.metadata.message_type == "train":
            rnd = int(msg.content["config"]["server-round"])
            received[(rnd, int(context.node_config["partition-id"]))] = msg.content["arrays"].to_numpy_ndarrays()
        return app(msg, context)

    inner = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    outputs: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}

    class Spy(wrapper):
        def aggregate_train(self, server_round, replies):
            arrays, metrics = super().aggregate_train(server_round, replies)
            outputs[server_round] = (inner._returned.to_numpy_ndarrays(), arrays.to_numpy_ndarrays())
            return arrays, metrics

    Spy(inner, **dp).start(grid=InProcessGrid(spy_app, N), num_rounds=2,
                           initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]))
    return inner, received, outputs


def _run_legacy(method: str, wrapper: type, dp: dict = FIXED):
    cfg = _cfg(method)
    exp = get_experiment(cfg)
    received: dict[tuple[int, int], list[np.ndarray]] = {}

    class SpyProxy(InProcessClientProxy):
        def fit(self, ins, timeout, group_id):
            received[(int(ins.config["server-round"]), self.node_id)] = parameters_to_ndarrays(ins.parameters)
            return super().fit(ins, timeout, group_id)

    inner = exp.spec.legacy_strategy(exp.server_setup(), dict(exp.params))
    outputs: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}

    class Spy(wrapper):
        def aggregate_fit(self, server_round, results, failures):
            params, metrics = super().aggregate_fit(server_round, results, failures)
            outputs[server_round] = (parameters_to_ndarrays(inner._returned), parameters_to_ndarrays(params))
            return params, metrics

    manager = PartitionClientManager(N, seed=cfg.seed)
    for pid in range(N):
        manager.register(SpyProxy(pid, N, ClientFactory(cfg)))
    server = Server(client_manager=manager, strategy=Spy(inner, **dp))
    server.set_max_workers(1)
    server.fit(num_rounds=2, timeout=None)
    return inner, received, outputs


RUNS = {"message": (_run_message, message_wrappers), "legacy": (_run_legacy, legacy_wrappers)}


def _assert_clients_got_the_noisy_model(method, received, outputs, n_model):
    own, noisy = outputs[1]
    assert len(own) == len(noisy) and any(not np.array_equal(a, b) for a, b in zip(own, noisy))  # noise was added
    round2 = {pid: arrays for (rnd, pid), arrays in received.items() if rnd == 2}
    assert sorted(round2) == list(range(N))
    for arrays in round2.values():
        payload = _payload(method, arrays, n_model)
        assert len(payload) == len(noisy)
        for got, want in zip(payload, noisy):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("api", sorted(RUNS))
@pytest.mark.parametrize("method", CENTRALIZED)
def test_server_side_clipping_reaches_the_clients(method, api):
    run, wrappers = RUNS[api]
    n_model = len(get_experiment(_cfg(method)).initial_parameters)
    if method in MODEL:
        _, received, outputs = run(method, wrappers.DifferentialPrivacyServerSideFixedClipping)
        _assert_clients_got_the_noisy_model(method, received, outputs, n_model)
    else:
        # Flower's server-side clipping treats every reply as a model update; these replies are not
        # (control variates, adapters only, low-rank factors): Flower's wrapper fails in round 1
        with pytest.raises(ValueError):
            run(method, wrappers.DifferentialPrivacyServerSideFixedClipping)


@pytest.mark.parametrize("api", sorted(RUNS))
@pytest.mark.parametrize("method", CENTRALIZED)
def test_client_side_clipping_reaches_the_clients_or_is_refused(method, api):
    run, wrappers = RUNS[api]
    n_model = len(get_experiment(_cfg(method)).initial_parameters)
    if method in MODEL + SCAFFOLD:
        _, received, outputs = run(method, wrappers.DifferentialPrivacyClientSideFixedClipping)
        _assert_clients_got_the_noisy_model(method, received, outputs, n_model)
    elif method in LORA:
        with pytest.raises(ExternalModelError, match="frozen .* arrays .* changed.*never reach"):
            run(method, wrappers.DifferentialPrivacyClientSideFixedClipping)
    else:
        with pytest.raises(ExternalModelError, match="differs from the one the strategy returned.*low-rank factors"):
            run(method, wrappers.DifferentialPrivacyClientSideFixedClipping)


@pytest.mark.parametrize("api", sorted(RUNS))
def test_adaptive_clipping_reaches_the_clients(api):
    """(Client-side adaptive clipping needs Flower's adaptiveclipping_mod on the clients.)"""
    run, wrappers = RUNS[api]
    wrapper = wrappers.DifferentialPrivacyServerSideAdaptiveClipping
    n_model = len(get_experiment(_cfg("fedavg")).initial_parameters)
    _, received, outputs = run("fedavg", wrapper, {"noise_multiplier": 1.0, "num_sampled_clients": N,
                                                   "initial_clipping_norm": 5.0, "clipped_count_stddev": 1.0})
    _assert_clients_got_the_noisy_model("fedavg", received, outputs, n_model)


@pytest.mark.parametrize("api", sorted(RUNS))
def test_decentralized_methods_refuse_a_changed_model(api):
    run, wrappers = RUNS[api]
    with pytest.raises(ExternalModelError, match="DFedAvg|every peer keeps its own model"):
        run("dfedavg", wrappers.DifferentialPrivacyClientSideFixedClipping)


def test_lora_methods_take_changed_adapters():
    """A user's wrapper that changes only the adapters (e.g. server momentum on them): the next
    round sends the changed adapters."""
    method = "fedmezo"
    exp = get_experiment(_cfg(method))
    inner = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    received: dict[tuple[int, int], list[np.ndarray]] = {}
    models: list = []

    def client_fn(context):
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    app = numpy_client_app(client_fn)

    def spy_app(msg, context):
        if msg.metadata.message_type == "train":
            received[(int(msg.content["config"]["server-round"]), int(context.node_config["partition-id"]))] = \
                msg.content["arrays"].to_numpy_ndarrays()
        return app(msg, context)

    class Halve(message_wrappers.FedAvg):  # any wrapper: delegate, change the adapters on the way out
        def __init__(self):
            super().__init__(fraction_evaluate=0.0)
            self.sent = {}

        def configure_train(self, server_round, arrays, config, grid):
            return inner.configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            arrays, metrics = inner.aggregate_train(server_round, replies)
            out = arrays.to_numpy_ndarrays()
            for i in inner.core.trainable:
                out[i] = out[i] * 0.5
            self.sent[server_round] = [out[i] for i in inner.core.trainable]
            return ArrayRecord({k: Array.from_numpy_ndarray(v) for k, v in zip(arrays.keys(), out)}), metrics

    wrapper = Halve()
    wrapper.start(grid=InProcessGrid(spy_app, N), initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
                  num_rounds=2)
    assert any(np.abs(a).sum() > 0 for a in wrapper.sent[1])
    round2 = [arrays for (rnd, _), arrays in received.items() if rnd == 2]
    assert len(round2) == N
    for arrays in round2:
        assert len(arrays) == len(wrapper.sent[1])
        for got, want in zip(arrays, wrapper.sent[1]):
            np.testing.assert_array_equal(got, want)
