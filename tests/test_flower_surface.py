"""Every strategy takes Flower's own FedAvg arguments for its API, with Flower's names and defaults,
read from Flower's installed signature at test time; where an argument cannot apply the docstring
says why and a conflicting value is refused with an error naming the user's class. User metric
aggregation functions are honoured, and a run whose replies are all rejected stops with the cause."""

from __future__ import annotations

import inspect
import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp.strategy import FedAvg as MessageFedAvg
from flwr.serverapp.strategy import Strategy as FlowerMessageStrategy

import flwr_strategies
import flwr_strategies.serverapp
from flwr_strategies.adapters import REQUIRED, LegacyStrategy, MessageStrategy, NoProgressError
from flwr_strategies.clients.app import partition_query
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

LEGACY = {n: getattr(flwr_strategies, n) for n in flwr_strategies.__all__
          if isinstance(getattr(flwr_strategies, n), type) and issubclass(getattr(flwr_strategies, n), LegacyStrategy)
          and getattr(flwr_strategies, n).core_cls is not None}
MESSAGE = {n: getattr(flwr_strategies.serverapp, n) for n in flwr_strategies.serverapp.__all__
           if isinstance(getattr(flwr_strategies.serverapp, n), type)
           and issubclass(getattr(flwr_strategies.serverapp, n), MessageStrategy)
           and getattr(flwr_strategies.serverapp, n).core_cls is not None}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)


def _required(cls) -> dict:
    values = {"model": Net(), "num_rounds": 5, "local_dataset_size": 100}
    return {k: values[k] for k, v in cls.arguments.items() if v is REQUIRED}


def _flower_parameters(flower_cls) -> dict[str, object]:
    return {p.name: p.default for p in inspect.signature(flower_cls.__init__).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _effective_defaults(cls) -> dict[str, object]:
    """Each parameter's default as the class's constructor applies it (a subclass's ``__init__``
    that overrides one default and passes ``**kwargs`` on, over the adapter's)."""
    out: dict[str, object] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass in (object,):
            continue
        for p in inspect.signature(init).parameters.values():
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                out.setdefault(p.name, p.default)
        if klass in (LegacyStrategy, MessageStrategy):
            break
    return out


def test_every_method_exists_in_both_apis():
    assert sorted(LEGACY) == sorted(MESSAGE)
    assert {"DFedCata", "FedLiLS", "FedLiLU", "DOADP", "FedMeZO", "FedMUD", "FedAvg", "Scaffold", "FedExP"} <= set(LEGACY)


@pytest.mark.parametrize("api,flower_cls,classes", [("legacy", LegacyFedAvg, LEGACY), ("message", MessageFedAvg, MESSAGE)])
def test_constructors_take_flowers_fedavg_arguments(api, flower_cls, classes):
    flower = _flower_parameters(flower_cls)
    assert len(flower) >= 10  # Flower's own signature was read
    for name, cls in sorted(classes.items()):
        ours = _effective_defaults(cls)
        doc = inspect.getdoc(cls) or ""
        for arg, default in flower.items():
            assert arg in ours, f"{name} ({api}) does not take Flower's {arg!r}"
            if ours[arg] == default or (ours[arg] is None and default is None):
                cls(**{arg: default}, **_required(cls))  # Flower's default, given explicitly, is accepted
            else:
                # a documented deviation: the docstring says why, and Flower's default is refused
                assert arg in doc and "Flower" in doc, f"{name}: {arg} default {ours[arg]!r} is not documented"
                with pytest.raises(ValueError, match=rf"^{name}: "):
                    cls(**{arg: default}, **_required(cls))


@pytest.mark.parametrize("classes,arg", [(LEGACY, "fraction_fit"), (MESSAGE, "fraction_train")])
def test_decentralized_methods_refuse_partial_participation(classes, arg):
    peers = {n: c for n, c in classes.items() if c.core_cls.full_participation}
    assert {"DFedCata", "DFedAvg", "DPSGD", "DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT"} <= set(peers)
    for name, cls in peers.items():
        assert "every" in (inspect.getdoc(inspect.getmodule(cls)) or "") + (inspect.getdoc(cls) or "")
        with pytest.raises(ValueError, match=rf"^{name}: every peer .* {arg} must be 1.0"):
            cls(**{arg: 0.5}, **_required(cls))


@pytest.mark.parametrize("classes", [LEGACY, MESSAGE], ids=["legacy", "message"])
def test_doadp_refuses_federated_evaluation_on_training_data(classes):
    for name in ("DOADP", "DPDO", "DPDDA", "CPGT"):
        cls = classes[name]
        assert cls(**_required(cls)).fraction_evaluate == 0.0
        with pytest.raises(ValueError, match=rf"^{name}: federated evaluation is refused .*training data"):
            cls(fraction_evaluate=1, **_required(cls))


def test_unknown_arguments_name_the_users_class():
    with pytest.raises(TypeError, match=r"^FedProx\(\) got an unexpected keyword argument 'mu'"):
        flwr_strategies.FedProx(mu=0.1)
    with pytest.raises(TypeError, match=r"^DFedCata\(\) got an unexpected keyword argument 'num_clients'.*learned"):
        flwr_strategies.serverapp.DFedCata(num_clients=4)
    with pytest.raises(TypeError, match=r"^FedMUD\(\) missing required keyword arguments \['model'\]"):
        flwr_strategies.FedMUD()
    with pytest.raises(ValueError, match=r"^FedAvg: inplace=False"):
        flwr_strategies.FedAvg(inplace=False)
    with pytest.raises(ValueError, match=r"^FedProx: proximal_mu"):
        flwr_strategies.serverapp.FedProx(proximal_mu=-1.0)


def test_hyperparameters_are_exactly_the_config_fields():
    """One way for every method: keyword arguments that are the fields of its config dataclasses
    (validated by them); a whole config object is not a second way in."""
    from dataclasses import fields

    for classes in (LEGACY, MESSAGE):
        for name, cls in classes.items():
            base = cls(**_required(cls))
            for key, cfg in base.configs.items():
                for f in fields(cfg):
                    value = getattr(cfg, f.name)
                    s = cls(**{f.name: value}, **_required(cls))
                    assert getattr(s.configs[key], f.name) == value and type(s.configs[key]) is type(cfg)
            with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'config'"):
                cls(config=base.config, **_required(cls))


# ------------------------------------------------------------------ a tiny federation, in process
N = 3


def _app(reply):
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg, context):
        pid = int(context.node_config["partition-id"])
        arrays = [a + 0.1 * (pid + 1) for a in msg.content["arrays"].to_numpy_ndarrays()]
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord(reply(pid, arrays))}),
                       reply_to=msg)

    app.query("partition")(partition_query)
    return app


def _start(strategy, reply, rounds=3):
    init = ArrayRecord([np.zeros((4, 2), np.float32), np.zeros(2, np.float32)])
    return strategy.start(grid=InProcessGrid(_app(reply), N), initial_arrays=init, num_rounds=rounds)


def test_message_api_honours_the_users_train_metrics_aggregation():
    seen = []

    def mine(contents, key):
        seen.append((len(contents), key))
        return MetricRecord({"sum_loss": float(sum(c["metrics"]["train_loss"] for c in contents))})

    s = flwr_strategies.serverapp.FedAvg(min_available_nodes=N, fraction_evaluate=0.0, train_metrics_aggr_fn=mine)
    result = _start(s, lambda pid, a: {"num-examples": 10 + pid, "train_loss": float(pid)}, rounds=2)
    assert seen == [(N, "num-examples"), (N, "num-examples")]
    assert result.train_metrics_clientapp[2]["sum_loss"] == 0.0 + 1.0 + 2.0


def test_legacy_api_honours_the_users_fit_metrics_aggregation():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    calls = []

    def mine(rows):
        calls.append(rows)
        return {"max_loss": max(m["train_loss"] for _, m in rows)}

    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], fit_metrics_aggregation_fn=mine)
    s._sampled[1] = [0, 1]
    s._pid_of_cid = {"a": 0, "b": 1}

    class Proxy:
        def __init__(self, cid):
            self.cid = cid

    res = [(Proxy(c), FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.ones(2, np.float32)]), 5,
                             {"train_loss": float(i)})) for i, c in enumerate("ab")]
    _, metrics = s.aggregate_fit(1, res, [])
    assert metrics["max_loss"] == 1.0 and len(calls[0]) == 2


def _nan_app():
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg, context):
        arrays = [np.full_like(a, np.nan) for a in msg.content["arrays"].to_numpy_ndarrays()]
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10})}),
                       reply_to=msg)

    app.query("partition")(partition_query)
    return app


def test_a_message_run_without_num_examples_stops_naming_the_metric():
    s = flwr_strategies.serverapp.FedAvg(min_available_nodes=N, fraction_evaluate=0.0)
    with pytest.raises(NoProgressError, match=r"rounds 1 to 2: every client reply was rejected.*metric 'num-examples'"):
        _start(s, lambda pid, a: {"train_loss": 0.1}, rounds=5)
    assert len(s.history.failure_log) == 2 * N


def test_a_message_run_whose_clients_diverge_stops_naming_the_learning_rate():
    s = flwr_strategies.serverapp.DFedAvg(min_available_nodes=N, fraction_evaluate=0.0, neighbours=2)
    init = ArrayRecord([np.zeros(3, np.float32)])
    with pytest.raises(NoProgressError, match=r"NaN or infinite.*Lower the learning rate"):
        s.start(grid=InProcessGrid(_nan_app(), N), initial_arrays=init, num_rounds=5)


def test_a_legacy_run_whose_replies_are_all_rejected_stops():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    class Proxy:
        def __init__(self, cid):
            self.cid = cid

    class CM:
        def wait_for(self, n, timeout):
            return True

        def num_available(self):
            return 2

    proxies = {0: Proxy("a"), 1: Proxy("b")}
    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], partition_resolver=lambda cm: proxies)
    bad = ndarrays_to_parameters([np.array([np.inf, 0.0], np.float32)])
    s.configure_fit(1, s.initialize_parameters(CM()), CM())
    s.aggregate_fit(1, [(p, FitRes(Status(Code.OK, ""), bad, 5, {})) for p in proxies.values()], [])
    s.configure_fit(2, s._returned, CM())
    with pytest.raises(NoProgressError, match="rounds 1 to 2.*learning rate"):
        s.aggregate_fit(2, [(p, FitRes(Status(Code.OK, ""), bad, 5, {})) for p in proxies.values()], [])


def test_the_driver_stops_a_run_whose_replies_are_all_rejected():
    from flwr_strategies.baselines.server import FedAvgServer
    from flwr_strategies.simulations.driver import CoreDriver, PartitionContexts

    core = FedAvgServer([np.zeros(2, np.float32)], min_train=2)
    driver = CoreDriver(core, lambda ctx, arrays, cfg: ([np.full(2, np.nan, np.float32)], 5, {}), PartitionContexts(2))
    with pytest.raises(NoProgressError, match="rounds 1 to 2"):
        driver.run(4)
    assert core.server_round == 2 and all(np.array_equal(a, np.zeros(2)) for a in core.global_arrays())


# ------------------------------------------------------------------ the legacy API learns the number of clients
class _Proxy:
    def __init__(self, pid):
        self.cid, self.pid = f"c{pid}", pid


class _Manager:
    def __init__(self, pids):
        self.proxies = {p: _Proxy(p) for p in pids}

    def wait_for(self, n, timeout):
        return len(self.proxies) >= n

    def num_available(self):
        return len(self.proxies)


def test_legacy_decentralized_strategy_learns_the_number_of_peers():
    cm = _Manager([0, 1])  # Flower's default federation: 2 SuperNodes
    s = flwr_strategies.DFedCata(initial_parameters=[np.zeros(3, np.float32)], neighbours=2,
                                 partition_resolver=lambda m: m.proxies)
    ins = s.configure_fit(1, s.initialize_parameters(cm), cm)
    assert s.core.num_partitions == 2 and len(ins) == 2


def test_legacy_strategy_with_a_missing_partition_fails_fast_naming_both():
    import time

    cm = _Manager([0, 2])  # partition 1 never connects
    s = flwr_strategies.DFedCata(initial_parameters=[np.zeros(3, np.float32)], neighbours=2, wait_timeout=1.0,
                                 partition_resolver=lambda m: m.proxies)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^DFedCata: 2 clients connected \(partitions \[0, 2\]\), but partitions \[1\]"):
        s.configure_fit(1, s.initialize_parameters(cm), cm)
    assert time.monotonic() - t0 < 10
    with pytest.raises(TimeoutError, match=r"only 1 of min_available_clients=2"):
        flwr_strategies.DFedAvg(initial_parameters=[np.zeros(3, np.float32)], wait_timeout=1.0,
                                partition_resolver=lambda m: m.proxies).configure_fit(1, None, _Manager([0]))


def test_a_clientapp_without_the_partition_query_is_asked_once():
    """Forgetting ``app.query("partition")(partition_query)``: one failed query (one ClientApp
    error), one warning, then the nodes are ordered by node id and the run goes on."""
    from flwr.clientapp import ClientApp

    inner = _app(lambda pid, a: {"num-examples": 10})
    plain = ClientApp()
    plain.train()(lambda msg, ctx: inner(msg, ctx))  # the same app without the query handler
    queries = []

    def counting(msg, ctx):
        if msg.metadata.message_type.startswith("query"):
            queries.append(ctx.node_id)
        return plain(msg, ctx)

    s = flwr_strategies.serverapp.FedAvg(min_available_nodes=N, fraction_evaluate=0.0)
    init = ArrayRecord([np.zeros(3, np.float32)])
    result = s.start(grid=InProcessGrid(counting, N), initial_arrays=init, num_rounds=2)
    assert len(queries) == 1 and s.num_partitions == N
    assert result.train_metrics_clientapp[2]["rejected"] == 0
