"""Replies through a real Message-API ``Grid`` keep the model's dtype and the state stays finite.

Each row runs a method's own Message-API strategy (``strategy.start``) on a ``Grid`` whose
ClientApp is the method's real client, except that the replies are tampered with on their way back
(as a faulty or hostile client would send them). Before issue 18 every row here was a silent
corruption: complex replies made the global model complex64, one complex reply lost its imaginary
part, float16 replies made the returned and the checkpointed model float16, and one FedMUD reply
of finite 3e38 values turned the global state into inf. Now each is rejected, naming the value,
and the global model keeps the dtype and the values it had.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.core.state import load_state, save_state
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

NUM_CLIENTS = 3


def _complex(a: np.ndarray) -> np.ndarray:
    return (a + 1j * np.ones_like(a)).astype(np.complex64) if a.dtype.kind == "f" else a


def _half(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16) if a.dtype.kind == "f" else a


def _huge(a: np.ndarray) -> np.ndarray:
    return np.full_like(a, 3e38) if a.dtype.kind == "f" else a


class TamperingApp:
    """The method's ClientApp, with ``tamper`` applied to the train replies of ``partitions``."""

    def __init__(self, app, tamper, partitions: set[int], rounds: set[int]) -> None:
        self.app, self.tamper, self.partitions, self.rounds = app, tamper, partitions, rounds

    def __call__(self, msg: Message, context):
        reply = self.app(msg, context)
        pid = int(context.node_config["partition-id"])
        cfg = msg.content.config_records.get("config", {})
        if (msg.metadata.message_type == "train" and not reply.has_error() and pid in self.partitions
                and int(cfg.get("server-round", 0)) in self.rounds):
            record = reply.content["arrays"]
            reply.content["arrays"] = ArrayRecord({k: Array.from_numpy_ndarray(self.tamper(v.numpy()))
                                                   for k, v in record.items()})
        return reply


def _run(method: str, tamper, partitions: set[int], rounds: set[int], num_rounds: int = 1, **params):
    cfg = ExperimentConfig(method=method, num_clients=NUM_CLIENTS, rounds=num_rounds, seed=0, progress=False,
                           fraction_fit=1.0, params=dict(params)).resolve()
    exp = get_experiment(cfg)
    models: list = []

    def client_fn(context):
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    grid = InProcessGrid(TamperingApp(numpy_client_app(client_fn), tamper, partitions, rounds), NUM_CLIENTS)
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    initial = [a.copy() for a in exp.initial_parameters]
    evaluated: dict[int, list[np.ndarray]] = {}

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        evaluated[server_round] = arrays.to_numpy_ndarrays()
        return MetricRecord({"loss": 0.0})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial), num_rounds=num_rounds,
                            evaluate_fn=evaluate_fn)
    return strategy, result, initial, evaluated


def _errors(strategy) -> str:
    return " | ".join(e["error"] for e in strategy.history.failure_log)


ALL = set(range(NUM_CLIENTS))


@pytest.mark.parametrize("method", ["fedavg", "fedli-ls", "scaffold"])
def test_complex_replies_are_rejected_and_the_model_stays_real(method):
    strategy, result, initial, _ = _run(method, _complex, ALL, {1})
    assert "complex64" in _errors(strategy)
    final = result.arrays.to_numpy_ndarrays()
    assert [a.dtype for a in final] == [a.dtype for a in initial]
    assert all(np.array_equal(a, b) for a, b in zip(final, initial))  # nothing aggregated
    assert strategy.history.rounds[-1]["rejected"] == NUM_CLIENTS


def _fail(a: np.ndarray) -> np.ndarray:
    raise RuntimeError("this client fails")


def test_one_complex_reply_is_rejected_not_truncated():
    strategy, result, initial, _ = _run("fedavg", _complex, {2}, {1})
    assert "partition 2: array 0 has dtype complex64, expected float32" in _errors(strategy)
    assert strategy.history.rounds[-1]["rejected"] == 1
    # the round is FedAvg of partitions 0 and 1 alone, exactly as when partition 2 fails
    _, without, _, _ = _run("fedavg", _fail, {2}, {1})
    final = result.arrays.to_numpy_ndarrays()
    assert all(a.dtype == b.dtype for a, b in zip(final, initial))
    assert all(np.array_equal(a, b) for a, b in zip(final, without.arrays.to_numpy_ndarrays()))
    assert not all(np.array_equal(a, b) for a, b in zip(final, initial))


def test_float16_replies_do_not_make_the_returned_model_float16():
    strategy, result, initial, evaluated = _run("fedavg", _half, ALL, {1})
    assert "dtype float16, expected float32" in _errors(strategy)
    assert [a.dtype for a in result.arrays.to_numpy_ndarrays()] == [a.dtype for a in initial]
    assert [a.dtype for a in evaluated[1]] == [a.dtype for a in initial]


def test_float16_replies_do_not_make_the_saved_model_float16(tmp_path):
    strategy, _, initial, _ = _run("fedavg", _half, ALL, {1})
    saved = load_state(save_state(tmp_path / "ckpt.npz", strategy.state_dict()))
    assert [a.dtype for a in saved["method"]["current"]] == [a.dtype for a in initial]
    assert all(np.array_equal(a, b) for a, b in zip(saved["method"]["current"], initial))


def test_fedmud_reply_of_3e38_rejects_the_round_and_keeps_the_state():
    strategy, result, initial, evaluated = _run("fedmud", _huge, {0}, {1}, num_rounds=2)
    rounds = strategy.history.rounds
    first = next(r for r in rounds if r["round"] == 1)
    second = next(r for r in rounds if r["round"] == 2)
    assert first["fit_round_rejected"] == 1 and first["rejected"] == NUM_CLIENTS
    assert "FedMUD's new global model array 2 is not finite (contains -inf)" in _errors(strategy)
    # the model after the rejected round is the model before it: the initial arrays (FedMUD's base
    # weights, redrawn from the seed, do not replace them while no client update was aggregated)
    assert all(np.array_equal(a, b) for a, b in zip(evaluated[1], initial))
    # ... and round 2's honest replies are all accepted and keep the model finite
    assert second["rejected"] == 0 and second["fit_round_rejected"] == 0
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())
    assert not all(np.array_equal(a, b) for a, b in zip(evaluated[2], initial))
