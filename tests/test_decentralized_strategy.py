"""The peer-emulating base strategy: per-client FitIns, stable identity, failures, metrics."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from flwr_strategies.decentralized import Topology, mix, mixing_matrix, restrict_to_alive
from flwr_strategies.decentralized.strategy import DecentralizedStrategy


class FakeProxy:
    def __init__(self, pid):
        self.cid = f"node-{pid}"
        self.pid = pid


def _strategy(m=6, d=4, **kw):
    init = [np.zeros((2, 2), dtype=np.float32)]
    proxies = {i: FakeProxy(i) for i in range(m)}
    s = DecentralizedStrategy(
        num_clients=m,
        initial_parameters=init,
        topology=Topology("random", m, seed=0, neighbours=4),
        partition_resolver=lambda cm: proxies,
        on_fit_config_fn=lambda r: {"lr": 0.1, "server_round": r},
        **kw,
    )
    return s, proxies


def _reply(proxy, arrays, loss=1.0):
    return (proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 10, {"partition-id": proxy.pid, "train_loss": loss}))


def _run_round(s, rnd, update, skip=()):
    ins = s.configure_fit(rnd, None, None)
    results = []
    for proxy, fi in ins:
        if proxy.pid in skip:
            continue
        arrays = parameters_to_ndarrays(fi.parameters)
        assert fi.config["partition-id"] == proxy.pid
        results.append(_reply(proxy, [update(proxy.pid, arrays[0])]))
    return ins, s.aggregate_fit(rnd, results, [RuntimeError("x")] * len(skip))


def test_each_client_gets_its_own_model_and_mixing_matches():
    s, proxies = _strategy()
    m = 6
    upd = lambda pid, a: a + (pid + 1)  # noqa: E731
    ins, (params, metrics) = _run_round(s, 1, upd)
    assert [p.pid for p, _ in ins] == list(range(m))
    Y = np.stack([np.full(4, i + 1.0, dtype=np.float32) for i in range(m)])
    W = mixing_matrix(Topology("random", m, seed=0, neighbours=4).graph(0))
    X1 = mix(W, Y)
    np.testing.assert_allclose(s.models.data, X1, rtol=1e-6)
    np.testing.assert_allclose(parameters_to_ndarrays(params)[0].ravel(), X1.mean(axis=0), rtol=1e-6)
    for key in ("consensus_distance", "failures", "links", "p2p_bytes", "spectral_gap", "train_loss"):
        assert key in metrics
    assert metrics["failures"] == 0 and metrics["links"] == W.nnz - m
    # round 2: every client receives its own (different) mixed model
    ins2 = s.configure_fit(2, None, None)
    sent = np.stack([parameters_to_ndarrays(fi.parameters)[0].ravel() for _, fi in ins2])
    np.testing.assert_array_equal(sent, s.models.data)
    assert len({tuple(r) for r in sent}) > 1


def test_failed_client_keeps_previous_model_neighbours_renormalise():
    s, _ = _strategy()
    m = 6
    _run_round(s, 1, lambda pid, a: a + pid)
    X1 = s.models.data.copy()
    ins, (params, metrics) = _run_round(s, 2, lambda pid, a: a + 10.0, skip=(3,))
    assert metrics["failures"] == 1
    np.testing.assert_array_equal(s.models.data[3], X1[3])
    alive = np.ones(m, dtype=bool)
    alive[3] = False
    Y = X1 + 10.0
    Y[3] = X1[3]
    W = restrict_to_alive(mixing_matrix(Topology("random", m, seed=0, neighbours=4).graph(1)), alive)
    np.testing.assert_allclose(s.models.data, mix(W, Y), rtol=1e-6)
    assert np.isfinite(s.models.data).all()


def test_duplicate_or_missing_partition_id_and_nan_are_errors():
    s, proxies = _strategy()
    s.configure_fit(1, None, None)
    r = _reply(proxies[0], [np.zeros((2, 2), np.float32)])
    with pytest.raises(ValueError, match="two results"):
        s.aggregate_fit(1, [r, r], [])
    bad = (proxies[1], FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros((2, 2), np.float32)]), 1, {}))
    with pytest.raises(ValueError, match="partition-id"):
        s.aggregate_fit(1, [bad], [])
    nan = _reply(proxies[2], [np.full((2, 2), np.nan, np.float32)])
    with pytest.raises(FloatingPointError, match="diverged"):
        s.aggregate_fit(1, [nan], [])


def test_evaluate_reports_average_and_client_accuracy():
    calls = []

    def evaluate_fn(rnd, arrays, cfg):
        v = float(arrays[0].mean())
        calls.append(v)
        return -v, {"accuracy": v}

    s, _ = _strategy(evaluate_fn=evaluate_fn)
    _run_round(s, 1, lambda pid, a: a + pid)
    loss, metrics = s.evaluate(1, None)
    assert metrics["accuracy"] == pytest.approx(s.models.data.mean())
    assert metrics["client_accuracy_mean"] == pytest.approx(s.models.data.mean(axis=1).mean())
    assert metrics["client_accuracy_min"] == pytest.approx(s.models.data.mean(axis=1).min())
    assert len(calls) == 1 + 6


def test_disconnected_round_accepted_only_for_time_varying_graphs():
    from flwr_strategies.decentralized import MixingError, is_connected

    top = Topology("random", 6, seed=1, neighbours=4)
    assert not is_connected(top.graph(1))
    init = [np.zeros(3, np.float32)]
    s = DecentralizedStrategy(num_clients=6, initial_parameters=init, topology=top)
    assert s.allow_disconnected  # default for time-varying graphs
    s.mixing_matrix(2)
    strict = DecentralizedStrategy(num_clients=6, initial_parameters=init, topology=top, allow_disconnected=False)
    with pytest.raises(MixingError, match="disconnected"):
        strict.mixing_matrix(2)


def test_constructor_validation():
    init = [np.zeros(3, np.float32)]
    with pytest.raises(ValueError, match="topology has 5 nodes"):
        DecentralizedStrategy(num_clients=4, initial_parameters=init, topology=Topology("ring", 5))
    with pytest.raises(ValueError, match="failure_policy"):
        DecentralizedStrategy(num_clients=5, initial_parameters=init, topology=Topology("ring", 5), failure_policy="drop")
