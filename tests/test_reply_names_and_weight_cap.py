"""Replies are read by name, and a client's ``num-examples`` has a bound (issue 29).

Names: every registered method runs one round on a Message-API ``Grid`` whose ClientApp is the
method's own client, with the replies' ``ArrayRecord`` entries reversed on their way back (each
name still on its own array, as a ClientApp returning sorted ``state_dict`` keys sends them). The
strategy puts them back in the order it sent, so the round equals the untouched round exactly; a
reply whose names are not the ones sent is rejected, naming both. On the legacy API a reply has no
names: arrays in another order are rejected where their shapes tell.

Weight cap: a client reporting ``num-examples = 2**31`` owns the whole average without a bound; with
the bound the project's runner and ServerApp set (each partition's size) it is weighted as its
partition, so the round equals the round in which it reported honestly, and the round's metrics
count the clip.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.common import Context, RecordDict

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.core import Reply
from flwr_strategies.core.validation import ReplyError, check_max_num_examples
from flwr_strategies.registry import list_methods
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

from apiharness import legacy_run

NUM_CLIENTS = 3
ATTACK = 2**31


def _methods() -> list[str]:
    return [name for name, spec in list_methods().items() if spec.build_core is not None]


def _cfg(method: str, **kw) -> ExperimentConfig:
    # client_seed: the DO-ADP family's clients draw their noise from their own secret; a fixed one
    # gives both runs of a comparison the same replies
    return ExperimentConfig(method=method, num_clients=NUM_CLIENTS, rounds=1, seed=0, progress=False,
                            fraction_fit=1.0, client_seed=7, **kw).resolve()


class Tampering:
    """The method's ClientApp, with ``tamper(record, metrics)`` applied to every train reply."""

    def __init__(self, app, tamper) -> None:
        self.app, self.tamper, self.changed = app, tamper, 0

    def __call__(self, msg: Message, context):
        reply = self.app(msg, context)
        if msg.metadata.message_type == "train" and not reply.has_error():
            record = reply.content["arrays"]
            new = self.tamper(int(context.node_config["partition-id"]), record, reply.content["metrics"])
            if new is not None and list(new.keys()) != list(record.keys()):
                self.changed += 1
                reply.content["arrays"] = new
        return reply


def _run(method: str, tamper=None, initial: ArrayRecord | None = None, **strategy_kw):
    exp = get_experiment(_cfg(method))
    models: list = []

    def client_fn(context):
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    app = Tampering(numpy_client_app(client_fn), tamper or (lambda pid, record, metrics: None))
    grid = InProcessGrid(app, NUM_CLIENTS)
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params), **strategy_kw)
    initial = initial if initial is not None else ArrayRecord([a.copy() for a in exp.initial_parameters])
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=1,
                            evaluate_fn=lambda rnd, arrays: MetricRecord({"loss": 0.0}))
    return strategy, result, app


def _reversed(pid, record: ArrayRecord, metrics) -> ArrayRecord:
    return ArrayRecord({k: record[k] for k in reversed(list(record.keys()))})


def _renamed(pid, record: ArrayRecord, metrics) -> ArrayRecord | None:
    keys = list(record.keys())
    if not keys:
        return None  # an inactive DO-ADP agent returns no arrays
    return ArrayRecord({("not-sent" if k == keys[0] else k): record[k] for k in keys})


def _same(a: ArrayRecord, b: ArrayRecord) -> bool:
    return list(a.keys()) == list(b.keys()) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a.to_numpy_ndarrays(), b.to_numpy_ndarrays()))


def _errors(strategy) -> str:
    return " | ".join(e["error"] for e in strategy.history.failure_log)


@pytest.mark.parametrize("method", _methods())
def test_reply_in_another_order_is_read_by_name(method):
    strategy, result, _ = _run(method)
    tampered, tampered_result, app = _run(method, _reversed)
    assert app.changed > 0 or method.startswith(("doadp", "dp")), "the tampering changed no reply"
    assert tampered.history.rounds[-1]["rejected"] == 0, _errors(tampered)
    assert _same(tampered_result.arrays, result.arrays)
    assert _same(ArrayRecord(tampered.core.global_arrays()), ArrayRecord(strategy.core.global_arrays()))


@pytest.mark.parametrize("method", _methods())
def test_reply_with_names_not_sent_is_rejected_naming_them(method):
    strategy, result, app = _run(method, _renamed)
    assert app.changed > 0
    assert strategy.history.rounds[-1]["rejected"] == app.changed
    errors = _errors(strategy)
    assert "'not-sent'" in errors and "do not match the names sent" in errors and "missing ['0']" in errors
    # a rejected reply is a failed client: the round equals the one in which those clients failed
    renamed = {pid for pid in range(NUM_CLIENTS) if f"partition {pid}: array names" in errors}
    assert len(renamed) == app.changed
    _, failed_result, _ = _run(method, lambda pid, record, metrics: _fail(pid) if pid in renamed else None)
    assert _same(result.arrays, failed_result.arrays)


def _fail(pid: int) -> None:
    raise RuntimeError(f"partition {pid} fails")


def test_batchnorm_weight_and_bias_in_sorted_order_are_not_swapped():
    """The issue's case: a ClientApp returning ``state_dict`` keys sorted, so a BatchNorm layer's
    bias (same shape as its weight) comes first. Read by position, FedAvg would average the bias
    into the weight; read by name, the aggregate is FedAvg's, in closed form."""
    from flwr.clientapp import ClientApp

    from flwr_strategies.clients.app import partition_query
    from flwr_strategies.serverapp import FedAvg

    app = ClientApp()
    app.query("partition")(partition_query)
    counts = {0: 10, 1: 30, 2: 60}

    @app.train()
    def train(msg, context):
        pid = int(context.node_config["partition-id"])
        state = {"bn.weight": np.full(4, pid + 1.0, np.float32), "bn.bias": np.full(4, -(pid + 1.0), np.float32)}
        record = ArrayRecord({k: Array.from_numpy_ndarray(state[k]) for k in sorted(state)})  # bias first
        return Message(RecordDict({"arrays": record, "metrics": MetricRecord({"num-examples": counts[pid]})}),
                       reply_to=msg)

    initial = ArrayRecord({"bn.weight": Array.from_numpy_ndarray(np.ones(4, np.float32)),
                           "bn.bias": Array.from_numpy_ndarray(np.zeros(4, np.float32))})
    strategy = FedAvg(min_available_nodes=NUM_CLIENTS, min_train_nodes=NUM_CLIENTS, fraction_evaluate=0.0)
    result = strategy.start(grid=InProcessGrid(app, NUM_CLIENTS), initial_arrays=initial, num_rounds=1)
    assert strategy.history.rounds[-1]["rejected"] == 0
    weight = sum(n * (p + 1.0) for p, n in counts.items()) / sum(counts.values())  # 2.5
    assert list(result.arrays.keys()) == ["bn.weight", "bn.bias"]
    np.testing.assert_allclose(result.arrays["bn.weight"].numpy(), np.full(4, weight), rtol=1e-6)
    np.testing.assert_allclose(result.arrays["bn.bias"].numpy(), np.full(4, -weight), rtol=1e-6)


def test_positional_names_for_a_named_model_are_rejected():
    """A reply named ``"0"``, ``"1"``... (``ArrayRecord(list)``) to a model sent under its
    ``state_dict`` names cannot be matched: rejected, naming both; the project's own ClientApp
    answers with the names it was sent."""
    exp = get_experiment(_cfg("fedavg"))
    arrays = [a.copy() for a in exp.initial_parameters]
    names = [f"layer{j // 2}.{'weight' if j % 2 == 0 else 'bias'}" for j in range(len(arrays))]
    named = ArrayRecord({k: Array.from_numpy_ndarray(a) for k, a in zip(names, arrays)})
    strategy, result, _ = _run("fedavg", initial=named)
    assert strategy.history.rounds[-1]["rejected"] == 0 and list(result.arrays.keys()) == names
    positional = lambda pid, record, metrics: ArrayRecord(record.to_numpy_ndarrays())
    strategy, final, app = _run("fedavg", positional, initial=named)
    assert app.changed == NUM_CLIENTS and strategy.history.rounds[-1]["rejected"] == NUM_CLIENTS
    assert f"array names ['0', '1'" in _errors(strategy)
    assert f"do not match the names sent ['{names[0]}', '{names[1]}'" in _errors(strategy)
    assert _same(final.arrays, named)


def test_legacy_reply_in_another_order_is_rejected_where_shapes_tell():
    """The legacy API has no names: the order is the layout. Reversed arrays of other shapes are
    rejected, naming the array and both shapes; the round aggregates nothing."""
    cfg = _cfg("fedavg")
    exp = get_experiment(cfg)
    shapes = [a.shape for a in exp.initial_parameters]
    assert shapes != shapes[::-1]
    clients = _legacy_clients(cfg, lambda arrays, n: (arrays[::-1], n))
    _, strategy, _ = legacy_run(cfg, clients=clients)
    assert strategy.history.rounds[-1]["rejected"] == NUM_CLIENTS
    assert f"array 0 has shape {tuple(shapes[-1])}, expected {tuple(shapes[0])}" in _errors(strategy)


# ---------------------------------------------------------------------------- weight cap
def _lie(pid: int, record: ArrayRecord, metrics) -> None:
    if pid == NUM_CLIENTS - 1:
        metrics["num-examples"] = ATTACK
    return None


#: methods that weight replies by their count with their default settings (SCAFFOLD and FedExP
#: average uniformly, as their papers do, unless ``weighting="num_examples"``)
WEIGHTED = ["fedavg", "fedprox", "fedli-ls", "fedmud"]


@pytest.mark.parametrize("method", WEIGHTED)
def test_inflated_count_is_clipped_to_the_partition_on_the_message_api(method):
    exp = get_experiment(_cfg(method))
    sizes = exp.server_setup().num_examples
    assert exp.spec.max_num_examples(exp.server_setup()) == sizes  # what the runner and the ServerApp set
    honest, honest_result, _ = _run(method)
    capped, capped_result, _ = _run(method, _lie)
    rec = capped.history.rounds[-1]
    assert rec["fit_num_examples_clipped"] == 1 and honest.history.rounds[-1]["fit_num_examples_clipped"] == 0
    # weighted as its partition: the round in which it told the truth
    assert _same(capped_result.arrays, honest_result.arrays)
    assert capped_result.train_metrics_clientapp[1]["num_examples_clipped"] == 1
    # without the bound it is the whole average (Flower's behaviour), so the round differs
    _, trusted_result, _ = _run(method, _lie, max_num_examples=None)
    assert not _same(trusted_result.arrays, honest_result.arrays)


def test_attacker_share_is_at_most_the_caps_share():
    """FedAvg with one bound for every reply: the attacker's weight in the average is
    ``cap / (cap + sum of the others)``, checked in closed form against the replies' arrays."""
    cap = 50
    captured: dict[int, list[np.ndarray]] = {}

    def record_and_lie(pid, record, metrics):
        captured[pid] = record.to_numpy_ndarrays()
        metrics["num-examples"] = ATTACK if pid == NUM_CLIENTS - 1 else int(metrics["num-examples"])
        honest_counts[pid] = int(metrics["num-examples"])

    honest_counts: dict[int, int] = {}
    strategy, result, _ = _run("fedavg", record_and_lie, max_num_examples=cap)
    counts = [min(honest_counts[p], cap) for p in range(NUM_CLIENTS)]
    assert counts[-1] == cap and strategy.history.rounds[-1]["fit_num_examples_clipped"] >= 1
    share = counts[-1] / sum(counts)
    assert share <= cap / (cap + sum(counts[:-1])) + 1e-12 and share < 0.5
    for j, got in enumerate(result.arrays.to_numpy_ndarrays()):
        expected = sum(np.float64(n) / sum(counts) * captured[p][j].astype(np.float64) for p, n in enumerate(counts))
        np.testing.assert_allclose(got, expected.astype(got.dtype), rtol=1e-5, atol=1e-6)


def test_inflated_count_is_clipped_on_the_legacy_api():
    cfg = _cfg("fedavg")
    honest_rounds, honest, _ = legacy_run(cfg)
    clients = _legacy_clients(cfg, lambda arrays, n: (arrays, ATTACK), only=NUM_CLIENTS - 1)
    _, capped, _ = legacy_run(cfg, clients=clients)
    assert capped.history.rounds[-1]["fit_num_examples_clipped"] == 1
    assert all(np.array_equal(a, b) for a, b in zip(capped.core.global_arrays(), honest.core.global_arrays()))


def test_max_num_examples_is_checked():
    assert check_max_num_examples(None) is None and check_max_num_examples(7) == 7
    assert check_max_num_examples({0: 3, 1: 4}) == {0: 3, 1: 4}
    for bad in (0, -1, 2.5, True, "10", {0: 0}, {-1: 5}, {0: 1.5}):
        with pytest.raises(ValueError, match="max_num_examples"):
            check_max_num_examples(bad)
    exp = get_experiment(_cfg("fedavg"))
    with pytest.raises(ValueError, match=r"max_num_examples must be an integer >= 1.*got 0"):
        exp.spec.message_strategy(exp.server_setup(), dict(exp.params), max_num_examples=0)


def test_partition_without_a_bound_is_rejected():
    exp = get_experiment(_cfg("fedavg"))
    core = exp.spec.build_core(exp.server_setup(), dict(exp.params))
    sampled = core.select(1, range(NUM_CLIENTS))
    ins = core.configure_train(1, sampled)
    replies = [Reply(i.partition_id, [np.array(a) for a in i.arrays], 10, {}) for i in ins]
    bounds = {p: 10 for p in sampled[:-1]}
    with pytest.raises(ReplyError, match=f"max_num_examples has no bound for partition {sampled[-1]}"):
        core.train_round(1, replies, sampled=sampled, on_bad_reply="raise", max_num_examples=bounds)
    result = core.train_round(1, replies, sampled=sampled, max_num_examples=bounds)
    assert result["rejected"] == 1 and result["num_examples_clipped"] == 0


# ---------------------------------------------------------------------------- legacy clients
def _legacy_clients(cfg: ExperimentConfig, change, only: int | None = None) -> list:
    """In-process legacy client proxies whose ``FitRes`` go through ``change(tensors, n)``."""
    from flwr_strategies.simulations.backends import InProcessClientProxy
    from flwr_strategies.simulations.experiment import ClientFactory

    factory = ClientFactory(cfg)

    def tampered(context: Context):
        client = factory(context)
        if only is not None and int(context.node_config["partition-id"]) != only:
            return client
        fit = client.fit

        def fit_changed(ins):
            res = fit(ins)
            tensors, res.num_examples = change(list(res.parameters.tensors), res.num_examples)
            res.parameters.tensors = tensors
            return res

        client.fit = fit_changed
        return client

    return [InProcessClientProxy(pid, cfg.num_clients, tampered) for pid in range(cfg.num_clients)]
