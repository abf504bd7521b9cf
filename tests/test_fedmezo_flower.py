"""Flower wiring of FedMeZO (T13, T18, T11 at the protocol level, T21) and an end-to-end run that
must learn, on the cached tiny pretrained base and generated instruction data."""

import numpy as np
import pytest
from flwr.common import (Code, FitRes, GetPropertiesRes, RecordDict, Status, ndarrays_to_parameters,
                         parameters_to_ndarrays)
from flwr.server.client_proxy import ClientProxy

from flwr_strategies.clients.fedmezo import FedMeZOClient
from flwr_strategies.common import payload_bytes
from flwr_strategies.fedmezo.lr_rules import personalised_lrs
from flwr_strategies.fedmezo.methods import _strategy
from flwr_strategies.sampling import PartitionClientManager
from flwr_strategies.simulations.experiment import Experiment, ExperimentConfig
from flwr_strategies.simulations.runner import run_experiment

H = 4


class _Proxy(ClientProxy):
    def __init__(self, cid, client):
        super().__init__(cid)
        self.client = client

    def get_properties(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), self.client.get_properties({}))

    def fit(self, ins, timeout, group_id):
        arr, n, m = self.client.fit(parameters_to_ndarrays(ins.parameters), ins.config)
        return FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arr), n, m)

    def get_parameters(self, ins, timeout, group_id):
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


def _cfg(**kw):
    base = dict(method="fedmezo", dataset="instructions", num_clients=3, rounds=2, lr=1e-3, local_epochs=None,
                local_steps=H, batch_size=1, params={"n_examples": 240, "lr_strategy": "round-wise", "lr_alpha_rel": 0.5},
                progress=False)
    base.update(kw)
    return ExperimentConfig(**base)


@pytest.fixture(scope="module")
def exp():
    return Experiment(_cfg())


def _run_rounds(exp, comm_mode, rounds=2):
    strat = _strategy(exp.server_setup(), {**exp.params, "comm_mode": comm_mode}, zo=True)
    cm = PartitionClientManager(3, seed=0)
    for pid in (2, 0, 1):
        client = FedMeZOClient(exp.client_setup(pid, RecordDict(), exp.task.model_fn()), exp.params)
        cm.register(_Proxy(f"c{pid}", client))
    params = strat.initialize_parameters(cm)
    log = []
    for rnd in range(1, rounds + 1):
        ins = strat.configure_fit(rnd, params, cm)
        results = [(p, p.fit(fi, None, None)) for p, fi in ins]
        up = sum(payload_bytes(r.parameters) + sum(len(v) for v in r.metrics.values() if isinstance(v, bytes))
                 for _, r in results)
        params, metrics = strat.aggregate_fit(rnd, results, [])
        log.append(dict(ins=ins, results=results, metrics=metrics, up=up))
    return parameters_to_ndarrays(params), log


def test_configure_fit_personal_rates_and_seed_upload_equals_plain(exp):
    arr_p, log_p = _run_rounds(exp, "params")
    arr_s, log_s = _run_rounds(exp, "seeds")
    # seed replay gives the same aggregated LoRA, bit for bit (snapshot restore)
    assert len(arr_p) == len(arr_s) == 8
    assert all(np.array_equal(a, b) for a, b in zip(arr_p, arr_s))
    # and far fewer uploaded bytes: 16 B per step vs 4 B per LoRA value
    assert log_s[0]["up"] == 3 * H * 16
    assert log_p[0]["up"] == 3 * 4096 * 4
    # round 1: everyone at eta0; round 2: round-wise personalised rates from round-1 losses
    r1 = [fi.config["lr"] for _, fi in log_p[0]["ins"]]
    assert r1 == [1e-3] * 3
    losses = [r.metrics["train_loss"] for _, r in log_p[0]["results"]]
    pids = [r.metrics["partition-id"] for _, r in log_p[0]["results"]]
    assert pids == [0, 1, 2]
    exp_lr = personalised_lrs(losses, 1e-3, 5e-4)
    r2 = [fi.config["lr"] for _, fi in log_p[1]["ins"]]
    assert np.allclose(r2, exp_lr, rtol=0, atol=1e-15) and len(set(r2)) == 3
    # client reply: num_examples = H*B and the metric keys
    _, res = log_p[0]["results"][0]
    assert res.num_examples == H * 1
    for k in ("train_loss", "train_loss_mid", "n_skipped", "lr_used", "partition-id", "proj_grad_abs_mean"):
        assert k in res.metrics
    # aggregation = uniform mean of the returned tensors (A and B separately)
    cl = [parameters_to_ndarrays(r.parameters) for _, r in log_p[1]["results"]]
    for k in range(8):
        ref = (np.mean([c[k].astype(np.float64) for c in cl], axis=0)).astype(np.float32)
        assert np.allclose(ref, arr_p[k], rtol=1e-6, atol=1e-9)


def test_identical_client_arrays_aggregate_to_themselves(exp):
    strat = _strategy(exp.server_setup(), dict(exp.params), zo=True)
    arrs = [np.random.default_rng(k).normal(size=(3, 4)).astype(np.float32) for k in range(2)]
    res = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrs), H, {"partition-id": i, "train_loss": 1.0}))
           for i in range(3)]
    strat._sent_lr = {0: 1e-3, 1: 1e-3, 2: 1e-3}
    out, _ = strat.aggregate_fit(1, res, [])
    assert all(np.array_equal(a, b) for a, b in zip(arrs, parameters_to_ndarrays(out)))


def test_bad_strategy_options(exp):
    with pytest.raises(ValueError, match="comm_mode"):
        _strategy(exp.server_setup(), {**exp.params, "comm_mode": "zip"}, zo=True)
    with pytest.raises(ValueError, match="lr_strategy"):
        _strategy(exp.server_setup(), {**exp.params, "lr_strategy": "fancy"}, zo=True)


def test_end_to_end_learns_and_is_deterministic():
    cfg = _cfg(rounds=8, local_steps=20, params={"n_examples": 360})
    r1 = run_experiment(cfg)
    losses = [r["loss"] for r in r1["rounds"]]
    assert all(np.isfinite(losses))
    assert min(losses[-3:]) <= 0.985 * losses[0]
    r2 = run_experiment(_cfg(rounds=2, local_steps=20, params={"n_examples": 360}))
    assert [r["loss"] for r in r2["rounds"]] == losses[:3]
