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
from flwr.server.client_manager import SimpleClientManager
from flwr.server.strategy import Strategy as LegacyFlowerStrategy
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


#: Every exported strategy of both APIs (``__all__`` of both modules), the adapters themselves included.
EXPORTED = {f"{module.__name__}.{n}": getattr(module, n) for module in (flwr_strategies, flwr_strategies.serverapp)
            for n in module.__all__ if isinstance(getattr(module, n), type)
            and issubclass(getattr(module, n), (LegacyFlowerStrategy, FlowerMessageStrategy))}


def _core_factory(initial_arrays, num_partitions):
    from flwr_strategies.baselines.server import FedAvgServer

    return FedAvgServer(initial_arrays)


def _required(cls) -> dict:
    if cls.core_cls is None:  # the adapters themselves: a strategy over a core_factory
        return {"core_factory": _core_factory}
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
    # every exported strategy is a method of one API or one of the two adapters
    assert len(EXPORTED) == len(LEGACY) + len(MESSAGE) + 2 == 46
    assert {c for c in EXPORTED.values() if c.core_cls is None} == {LegacyStrategy, MessageStrategy}


def test_every_exported_strategy_takes_flowers_fedavg_arguments():
    """All exported strategies of both APIs, read from their visible signature (what
    ``inspect.signature``, ``help()`` and IDEs show), against Flower's installed FedAvg."""
    flower = {LegacyFlowerStrategy: _flower_parameters(LegacyFedAvg), FlowerMessageStrategy: _flower_parameters(MessageFedAvg)}
    assert all(len(v) >= 10 for v in flower.values())  # Flower's own signatures were read
    missing, checked = [], 0
    for name, cls in sorted(EXPORTED.items()):
        api = LegacyFlowerStrategy if issubclass(cls, LegacyFlowerStrategy) else FlowerMessageStrategy
        ours = {p.name: p.default for p in inspect.signature(cls).parameters.values()}
        doc = inspect.getdoc(cls) or ""
        short = cls.__name__
        for arg, default in flower[api].items():
            if arg not in ours:
                missing.append((name, arg))
                continue
            checked += 1
            if ours[arg] == default or (ours[arg] is None and default is None):
                cls(**{arg: default}, **_required(cls))  # Flower's default, given explicitly, is accepted
            else:
                # a documented deviation: the docstring says why, and Flower's default is refused
                assert arg in doc and "Flower" in doc, f"{name}: {arg} default {ours[arg]!r} is not documented"
                with pytest.raises(ValueError, match=rf"^{short}: "):
                    cls(**{arg: default}, **_required(cls))
    assert missing == []
    assert checked == sum(len(flower[LegacyFlowerStrategy if issubclass(c, LegacyFlowerStrategy)
                                     else FlowerMessageStrategy]) for c in EXPORTED.values())


def _method_defaults(cls) -> dict[str, object]:
    """Every hyperparameter (config field) and method argument of ``cls`` with the method's default."""
    from dataclasses import MISSING, fields

    out: dict[str, object] = {}
    for config in cls.hyperparameters.values():
        for f in fields(config):
            if not isinstance(config, type):
                out[f.name] = getattr(config, f.name)
            else:
                out[f.name] = f.default if f.default is not MISSING else f.default_factory()
    for k, v in cls.arguments.items():
        out[k] = inspect.Parameter.empty if v is REQUIRED else v
    return out


def test_signatures_name_every_hyperparameter_without_kwargs():
    for name, cls in sorted(EXPORTED.items()):
        sig = inspect.signature(cls)
        kinds = {p.kind for p in sig.parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds, name
        for field, default in _method_defaults(cls).items():
            p = sig.parameters[field]
            assert p.kind is inspect.Parameter.KEYWORD_ONLY, (name, field)
            assert p.default == default or (p.default is default), (name, field, p.default, default)
    doadp = inspect.signature(flwr_strategies.DOADP).parameters
    assert doadp["epsilon"].default == 1.0 and doadp["epsilon"].annotation is float
    assert doadp["num_rounds"].default is inspect.Parameter.empty  # required
    assert doadp["fraction_evaluate"].default == 0.0  # the private methods' documented deviation


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_constructor_accepts_exactly_its_signature(name):
    """Every named parameter is accepted; nothing else is: an unknown keyword is a TypeError naming
    it and the valid ones, a required one missing is a TypeError, extra positional arguments too."""
    cls = EXPORTED[name]
    sig = inspect.signature(cls)
    required = _required(cls)
    for p in sig.parameters.values():
        if p.name in required or p.name == "core_factory":
            continue
        value = p.default
        if p.name == "initial_parameters" or p.name == "fraction_evaluate":
            continue  # covered by the Flower-surface test (a model / the refused values)
        cls(**{p.name: value}, **required)
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\(\) got an unexpected keyword argument 'not_an_argument'"):
        cls(not_an_argument=1, **required)
    for missing in [k for k in required if k != "core_factory"]:
        with pytest.raises(TypeError, match=rf"^{cls.__name__}\(\) missing required keyword arguments \['{missing}'\]"):
            cls(**{k: v for k, v in required.items() if k != missing})
    positional = [p for p in sig.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    with pytest.raises(TypeError):
        sig.bind(*[p.default for p in positional], 0)
    with pytest.raises(TypeError):
        cls(*[p.default for p in positional], 0, **required)
    if positional:  # Flower's Message-API arguments are positional too, as in Flower's FedAvg
        s = cls(*[p.default for p in positional], **required)
        assert s.fraction_train == positional[0].default


def test_unknown_argument_names_the_valid_ones():
    with pytest.raises(TypeError, match=r"^DFedCata\(\) got an unexpected keyword argument 'betta'; its method "
                                        r"arguments are \[.*'beta'.*'lam'"):
        flwr_strategies.DFedCata(betta=0.5)


def test_help_shows_the_hyperparameters_and_their_defaults():
    import pydoc

    for cls in (flwr_strategies.DFedCata, flwr_strategies.serverapp.DFedCata):
        text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        assert "beta: float = 0.99" in text and "lam: float = 0.05" in text


@pytest.mark.parametrize("cls,field,key,value,bad", [
    (flwr_strategies.FedLiLS, "armijo", "armijo_c", 0.5, 2.0),
    (flwr_strategies.serverapp.FedLiLS, "armijo", "armijo_c", 0.5, 2.0),
    (flwr_strategies.FedLiLU, "dfw", "server_eta", 0.5, -1.0),
])
def test_a_nested_config_is_accepted_as_a_dict(cls, field, key, value, bad):
    from dataclasses import replace

    default = getattr(cls().config, field)
    nested = getattr(cls(**{field: {key: value}}).config, field)
    assert nested == replace(default, **{key: value})  # the other fields stay the method's defaults
    assert type(nested) is type(default)
    with pytest.raises(TypeError, match=rf"^{cls.__name__}: {field}: .*'c'"):
        cls(**{field: {"c": 0.5}})
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: {field}: .*{key}"):
        cls(**{field: {key: bad}})


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
    s.session.sampled[1] = [0, 1]
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

    proxies = {0: Proxy("a"), 1: Proxy("b")}
    cm = _Manager([])
    for proxy in proxies.values():
        cm.register(proxy)
    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], partition_resolver=lambda cm: proxies)
    bad = ndarrays_to_parameters([np.array([np.inf, 0.0], np.float32)])
    s.configure_fit(1, s.initialize_parameters(cm), cm)
    s.aggregate_fit(1, [(p, FitRes(Status(Code.OK, ""), bad, 5, {})) for p in proxies.values()], [])
    s.configure_fit(2, s._returned, cm)
    with pytest.raises(NoProgressError, match="rounds 1 to 2.*learning rate"):
        s.aggregate_fit(2, [(p, FitRes(Status(Code.OK, ""), bad, 5, {})) for p in proxies.values()], [])


def test_a_legacy_run_with_accept_failures_false_and_a_failure_each_round_stops():
    """Flower's FedAvg semantics: with ``accept_failures=False`` a round with a failed client is not
    aggregated (the model stays); two such rounds in a row stop the run like rounds whose every
    client failed, with the reason named."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    class Proxy:
        def __init__(self, cid):
            self.cid = cid

    proxies = {0: Proxy("a"), 1: Proxy("b")}
    cm = _Manager([])
    for proxy in proxies.values():
        cm.register(proxy)
    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], accept_failures=False,
                               partition_resolver=lambda cm: proxies)
    good = ndarrays_to_parameters([np.ones(2, np.float32)])
    params = s.initialize_parameters(cm)
    s.configure_fit(1, params, cm)
    assert s.aggregate_fit(1, [(proxies[0], FitRes(Status(Code.OK, ""), good, 5, {}))], [RuntimeError("node lost")]) \
        == (None, {})
    assert all(np.array_equal(a, np.zeros(2)) for a in s.core.model_arrays())
    s.configure_fit(2, params, cm)
    with pytest.raises(NoProgressError, match="rounds 1 to 2: a client failed and accept_failures=False drops the round"):
        s.aggregate_fit(2, [(proxies[0], FitRes(Status(Code.OK, ""), good, 5, {}))], [RuntimeError("node lost")])
    assert all(np.array_equal(a, np.zeros(2)) for a in s.core.model_arrays())


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


class _Manager(SimpleClientManager):
    """Flower's client manager with the clients of ``pids`` connected (``proxies``: by partition)."""

    def __init__(self, pids):
        super().__init__()
        self.proxies = {p: _Proxy(p) for p in pids}
        for proxy in self.proxies.values():
            self.register(proxy)

    def wait_for(self, num_clients, timeout=86400):
        return self.num_available() >= num_clients  # no waiting: nobody else connects


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


# ------------------------------------------------------------------ the legacy API samples through the ClientManager
class _Odd:
    """A Criterion admitting the clients of odd partitions only."""

    def select(self, client):
        return client.pid % 2 == 1


class _Recording(_Manager):
    """A user's own ClientManager: Flower's, recording every ``sample`` call."""

    def __init__(self, pids):
        super().__init__(pids)
        self.calls = []

    def sample(self, num_clients, min_num_clients=None, criterion=None):
        self.calls.append((num_clients, min_num_clients, criterion))
        return super().sample(num_clients, min_num_clients, criterion)


@pytest.mark.parametrize("fraction_fit,expected", [(1.0, 3), (0.7, 2)])  # int(0.7 * 3) of the 3 admitted
def test_legacy_strategy_samples_through_the_client_manager_with_the_criterion(fraction_fit, expected):
    cm = _Recording(range(6))
    criterion = _Odd()
    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], fraction_fit=fraction_fit,
                               min_fit_clients=1, min_available_clients=6, fraction_evaluate=1.0,
                               min_evaluate_clients=1, criterion=criterion, partition_resolver=lambda m: m.proxies)
    for rnd in (1, 2, 3):
        ins = s.configure_fit(rnd, s.initialize_parameters(cm), cm)
        chosen = [proxy.pid for proxy, _ in ins]
        assert len(chosen) == expected and set(chosen) <= {1, 3, 5}, chosen  # the method chooses among admitted
        assert [fit.config["partition-id"] for _, fit in ins] == chosen
        assert cm.calls[-1] == (3, 6, criterion)  # every client the criterion admits, Flower's call
    evaluating = s.configure_evaluate(3, s.initialize_parameters(cm), cm)
    assert {proxy.pid for proxy, _ in evaluating} <= {1, 3, 5} and cm.calls[-1][2] is criterion


def test_legacy_strategy_honours_what_a_custom_client_manager_returns():
    class OnlyFirstTwo(_Recording):
        def sample(self, num_clients, min_num_clients=None, criterion=None):
            super().sample(num_clients, min_num_clients, criterion)
            return [self.proxies[0], self.proxies[1]]

    cm = OnlyFirstTwo(range(4))
    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], min_available_clients=4,
                               partition_resolver=lambda m: m.proxies)
    ins = s.configure_fit(1, s.initialize_parameters(cm), cm)
    assert sorted(proxy.pid for proxy, _ in ins) == [0, 1] and cm.calls == [(4, 4, None)]


def test_a_criterion_must_be_one():
    with pytest.raises(ValueError, match=r"^FedAvg: criterion must be a flwr.server.criterion.Criterion"):
        flwr_strategies.FedAvg(criterion=lambda client: True)


def test_a_users_subclass_gets_its_signature():
    """A subclass that declares more hyperparameters shows them; one whose own ``__init__`` adds an
    argument shows that ``__init__``."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Extra:
        gain: float = 2.0

    class Declared(flwr_strategies.FedAvg):
        hyperparameters = {"extra": Extra}

    assert inspect.signature(Declared).parameters["gain"].default == 2.0

    class Own(flwr_strategies.FedAvg):
        def __init__(self, tag: str, **kwargs):
            super().__init__(**kwargs)
            self.tag = tag

    assert list(inspect.signature(Own).parameters) == ["tag", "kwargs"]
    assert Own("x", fraction_fit=0.5).tag == "x"


def test_an_empty_sample_is_asked_again_once():
    """Flower's SimpleClientManager returns no client when one left between the count of admitted
    clients and the sample; the strategy asks once more."""
    class Racy(_Recording):
        def sample(self, num_clients, min_num_clients=None, criterion=None):
            out = super().sample(num_clients, min_num_clients, criterion)
            return [] if len(self.calls) == 1 else out

    cm = Racy(range(3))
    s = flwr_strategies.FedAvg(initial_parameters=[np.zeros(2, np.float32)], min_available_clients=3,
                               partition_resolver=lambda m: m.proxies)
    ins = s.configure_fit(1, s.initialize_parameters(cm), cm)
    assert len(ins) == 3 and len(cm.calls) == 2
