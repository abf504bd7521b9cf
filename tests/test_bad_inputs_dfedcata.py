"""Bad inputs for DFedCata and its baselines (issue 13), table-driven.

1. Impossible settings: an error naming the setting and the value, raised when the strategy (or
   client) is built, before any training.
2. Tampered replies to the raw cores: under ``on_bad_reply="raise"`` a ``ReplyError`` with the state
   unchanged; under ``"drop"`` the reply counts as a failed peer (the state is unchanged when it was
   the round's only reply, and equals a round in which that peer failed otherwise). A reply can never
   write another peer's row.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from flwr_strategies.core.messages import Reply
from flwr_strategies.core.validation import ReplyError
from flwr_strategies.decentralized.config import GraphConfig
from flwr_strategies.dfedcata.config import DFedCataConfig, LocalRuleConfig
from flwr_strategies.dfedcata.server import DFedAvgServer, DFedCataServer, DPSGDServer
from flwr_strategies.registry import get_method, resolve_params
from flwr_strategies.setup import ServerSetup, TrainConfig

NAN, INF = float("nan"), float("inf")


def _setup(num_clients=5, fraction_fit=1.0, lr=0.1, momentum=0.0) -> ServerSetup:
    return ServerSetup(initial_parameters=[np.zeros((3, 2), np.float32), np.zeros(2, np.float32)], evaluate_fn=None,
                       num_clients=num_clients, fraction_fit=fraction_fit, num_rounds=3, seed=0,
                       train=TrainConfig(lr=lr, momentum=momentum), model_fn=lambda: None,
                       fit_config=lambda r: {"lr": lr, "server_round": r})


def _cli(method, sets: dict[str, str], **setup):
    """Build the method's core the way ``python -m simulations run --method M --set k=v`` does."""
    spec = get_method(method)
    spec.build_core(_setup(**setup), resolve_params(spec, sets))


SETTINGS = [
    # (id, callable, the setting the message must name)
    ("beta=1", lambda: DFedCataConfig(beta=1.0), "beta"),
    ("beta=nan", lambda: DFedCataConfig(beta=NAN), "beta"),
    ("beta<0", lambda: DFedCataConfig(beta=-0.1), "beta"),
    ("beta=True", lambda: DFedCataConfig(beta=True), "beta"),
    ("lam<0", lambda: DFedCataConfig(lam=-0.01), "lam"),
    ("lam=inf", lambda: DFedCataConfig(lam=INF), "lam"),
    ("lam*lr>=1", lambda: DFedCataConfig(lam=10.0, lr=0.1), "lr \\* lam"),
    ("anchor", lambda: DFedCataConfig(extrapolation_anchor="prev"), "extrapolation_anchor"),
    ("sequential=str", lambda: DFedCataConfig(sequential_inplace="yes"), "sequential_inplace"),
    ("neighbours=0", lambda: GraphConfig(neighbours=0), "neighbours"),
    ("neighbours=1", lambda: GraphConfig(neighbours=1), "neighbours"),
    ("er p=0", lambda: GraphConfig(topology="erdos_renyi", topology_p=0.0), "topology_p"),
    ("p=1.5", lambda: GraphConfig(topology="erdos_renyi", topology_p=1.5), "topology_p"),
    ("p=nan", lambda: GraphConfig(topology="watts_strogatz", topology_p=NAN), "topology_p"),
    ("ws_k odd", lambda: GraphConfig(topology="ws", ws_k=3), "ws_k"),
    ("topology", lambda: GraphConfig(topology="star"), "topology"),
    ("weights", lambda: GraphConfig(weights="max"), "weights"),
    ("failure_policy", lambda: GraphConfig(failure_policy="drop"), "failure_policy"),
    ("client_eval_every<0", lambda: GraphConfig(client_eval_every=-1), "client_eval_every"),
    ("local_momentum=2", lambda: LocalRuleConfig(local_momentum=2.0), "local_momentum"),
    ("rho<0", lambda: LocalRuleConfig(rho=-1.0), "rho"),
    ("rho=nan", lambda: LocalRuleConfig(rho=NAN), "rho"),
    ("steps_per_round<0", lambda: LocalRuleConfig(steps_per_round=-1), "steps_per_round"),
    ("clip_scope", lambda: LocalRuleConfig(clip_scope="both"), "clip_scope"),
    # the command line, before training (python -m simulations run --method M --set k=v)
    ("cli neighbours=0", lambda: _cli("dfedcata", {"neighbours": "0"}), "neighbours"),
    ("cli er p=0", lambda: _cli("dfedavg", {"topology": "erdos_renyi", "topology_p": "0"}), "topology_p"),
    ("cli dfedavgm local_momentum=2", lambda: _cli("dfedavgm", {"local_momentum": "2"}), "local_momentum"),
    ("cli dfedsam rho=-1", lambda: _cli("dfedsam", {"rho": "-1"}), "rho"),
    ("cli fedsam rho=nan", lambda: _cli("fedsam", {"rho": "nan"}, fraction_fit=0.4), "rho"),
    ("cli dpsgd steps=-1", lambda: _cli("dpsgd", {"steps_per_round": "-1"}), "steps_per_round"),
    ("cli beta=1", lambda: _cli("dfedcata", {"beta": "1"}), "beta"),
    ("cli lam*lr", lambda: _cli("dfedcata", {"lam": "20"}), "lr \\* lam"),
    ("cli allow_disconnected", lambda: _cli("dfedcata", {"allow_disconnected": "maybe"}), "allow_disconnected"),
    ("cli fraction_fit<1", lambda: _cli("dfedavg", {}, fraction_fit=0.5), "fraction_fit"),
    ("cli one peer", lambda: _cli("dpsgd", {}, num_clients=1), "peers"),
    ("cli momentum conflict", lambda: _cli("dfedavgm", {}, momentum=0.5), "momentum"),
    ("cli clip_scope", lambda: _cli("dfedcata", {"clip_scope": "everything"}), "clip_scope"),
]


@pytest.mark.parametrize("build,name", [(b, n) for _, b, n in SETTINGS], ids=[i for i, _, _ in SETTINGS])
def test_impossible_setting_is_an_error_naming_it(build, name):
    with pytest.raises(ValueError, match=name):
        build()


def test_legacy_and_message_classes_validate_in_the_constructor():
    from flwr_strategies.dfedcata import serverapp, strategy

    init = [np.zeros(3, np.float32)]
    with pytest.raises(ValueError, match="neighbours"):
        serverapp.DFedCata(neighbours=0)
    with pytest.raises(ValueError, match="beta"):
        serverapp.DFedCata(beta=float("nan"))
    with pytest.raises(ValueError, match="topology_p"):
        strategy.DFedAvg(initial_parameters=init, topology="erdos_renyi", topology_p=0.0)
    with pytest.raises(ValueError, match="DFedAvg: every peer .* fraction_fit"):
        strategy.DFedAvg(fraction_fit=0.5)
    with pytest.raises(ValueError, match="fraction_train"):
        serverapp.DPSGD(fraction_train=0.3)


# ------------------------------------------------------------------ tampered replies
M = 5
SHAPES = [(3, 2), (2,)]


def _good(pid, value=None):
    v = float(pid + 1) if value is None else value
    return Reply(pid, [np.full(s, v, np.float32) for s in SHAPES], 10, {"train_loss": 0.5})


TAMPERED = [
    ("wrong shape (1,1)", lambda: Reply(2, [np.ones((1, 1), np.float32), np.ones(2, np.float32)], 10, {})),
    ("transposed", lambda: Reply(2, [np.ones((2, 3), np.float32), np.ones(2, np.float32)], 10, {})),
    ("one array too many", lambda: Reply(2, _good(2).arrays + [np.ones(2, np.float32)], 10, {})),
    ("one array missing", lambda: Reply(2, _good(2).arrays[:1], 10, {})),
    ("no arrays", lambda: Reply(2, [], 10, {})),
    ("integer dtype", lambda: Reply(2, [np.ones((3, 2), np.int64), np.ones(2, np.int64)], 10, {})),
    ("NaN", lambda: Reply(2, [np.full((3, 2), np.nan, np.float32), np.ones(2, np.float32)], 10, {})),
    ("inf", lambda: Reply(2, [np.ones((3, 2), np.float32), np.array([1.0, np.inf], np.float32)], 10, {})),
    ("partition -1", lambda: Reply(-1, _good(4).arrays, 10, {})),
    ("partition m", lambda: Reply(M, _good(4).arrays, 10, {})),
    ("partition not an int", lambda: Reply("2", _good(2).arrays, 10, {})),
    ("partition float", lambda: Reply(2.0, _good(2).arrays, 10, {})),
    ("negative num_examples", lambda: Reply(2, _good(2).arrays, -1, {})),
    ("not a list of arrays", lambda: Reply(2, [[1.0, 2.0], np.ones(2, np.float32)], 10, {})),
]

CORES = {
    "dfedcata": lambda: DFedCataServer([np.zeros(s, np.float32) for s in SHAPES], num_partitions=M,
                                       config=DFedCataConfig(beta=0.9), graph=GraphConfig(neighbours=3),
                                       on_train_config=lambda r: {"lr": 0.1}),
    "dfedavg": lambda: DFedAvgServer([np.zeros(s, np.float32) for s in SHAPES], num_partitions=M,
                                     graph=GraphConfig(neighbours=3)),
    "dpsgd": lambda: DPSGDServer([np.zeros(s, np.float32) for s in SHAPES], num_partitions=M,
                                 graph=GraphConfig(topology="ring")),
}


def _state(core):
    s = copy.deepcopy(core.state_dict())
    s.pop("server_round")
    return s


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _assert_same_state(a[key], b[key])
        elif isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key])
        elif isinstance(a[key], list) and a[key] and isinstance(a[key][0], np.ndarray):
            assert len(a[key]) == len(b[key])
            for u, v in zip(a[key], b[key]):
                np.testing.assert_array_equal(u, v)
        else:
            assert a[key] == b[key], key


def _warm(core):
    core.configure_train(1, list(range(M)))
    core.train_round(1, [_good(i) for i in range(M)], sampled=range(M), on_bad_reply="raise")
    core.configure_train(2, list(range(M)))
    return core


@pytest.mark.parametrize("core_name", sorted(CORES))
@pytest.mark.parametrize("make", [t for _, t in TAMPERED], ids=[i for i, _ in TAMPERED])
def test_tampered_reply_raise_leaves_state_unchanged(core_name, make):
    core = _warm(CORES[core_name]())
    before = _state(core)
    with pytest.raises(ReplyError):
        core.train_round(2, [_good(0), make(), _good(1)], sampled=range(M), on_bad_reply="raise")
    _assert_same_state(before, _state(core))


@pytest.mark.parametrize("core_name", sorted(CORES))
@pytest.mark.parametrize("make", [t for _, t in TAMPERED], ids=[i for i, _ in TAMPERED])
def test_tampered_reply_drop_is_a_failure_and_touches_no_row(core_name, make):
    alone = _warm(CORES[core_name]())
    before = _state(alone)
    res = alone.train_round(2, [make()], sampled=range(M), on_bad_reply="drop")
    assert res["rejected"] == 1 and res["failures"] == M
    _assert_same_state(before, _state(alone))  # the round's only reply was bad: nothing changes
    # with the other peers' good replies: exactly the round in which peer 2 (or 4) failed
    bad = make()
    victim = bad.partition_id if isinstance(bad.partition_id, int) and 0 <= bad.partition_id < M else None
    others = [i for i in range(M) if i != (victim if victim is not None else 4)]
    mixed = _warm(CORES[core_name]())
    res = mixed.train_round(2, [_good(i, 7.0) for i in others] + [bad], sampled=range(M), on_bad_reply="drop")
    assert res["rejected"] == 1
    twin = _warm(CORES[core_name]())
    twin.train_round(2, [_good(i, 7.0) for i in others], sampled=range(M), on_bad_reply="drop")
    np.testing.assert_array_equal(mixed.models.data, twin.models.data)
    assert np.isfinite(mixed.models.data).all()


def test_duplicate_and_unsampled_replies():
    core = _warm(CORES["dfedcata"]())
    before = _state(core)
    with pytest.raises(ReplyError, match="second reply"):
        core.train_round(2, [_good(1), _good(1, 50.0)], sampled=range(M), on_bad_reply="raise")
    _assert_same_state(before, _state(core))
    res = core.train_round(2, [_good(1), _good(1, 50.0)], sampled=range(M), on_bad_reply="drop")
    assert res["rejected"] == 1 and not (core.models.data == 50.0).any()
    # sequential mode: only the peer whose turn it is may reply
    seq = DFedCataServer([np.zeros(s, np.float32) for s in SHAPES], num_partitions=M, graph=GraphConfig(neighbours=3),
                         config=DFedCataConfig(beta=0.9, sequential_inplace=True), on_train_config=lambda r: {"lr": 0.1})
    (ins,) = seq.configure_train(1, list(range(M)))  # peer 0's turn
    state = _state(seq)
    with pytest.raises(ReplyError, match="not sampled"):
        seq.train_round(1, [_good(3)], sampled=[ins.partition_id], on_bad_reply="raise")
    _assert_same_state(state, _state(seq))


def test_legacy_adapter_rejects_a_reply_claiming_another_partition():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    from flwr_strategies.dfedcata.strategy import DFedAvg

    class Proxy:
        def __init__(self, pid):
            self.cid, self.pid = f"c{pid}", pid

    proxies = {i: Proxy(i) for i in range(M)}
    s = DFedAvg(initial_parameters=[np.zeros(s, np.float32) for s in SHAPES], neighbours=3,
                partition_resolver=lambda cm: proxies, min_available_clients=1)

    from flwr.server.client_manager import SimpleClientManager

    cm = SimpleClientManager()
    for proxy in proxies.values():
        cm.register(proxy)
    ins = s.configure_fit(1, s.initialize_parameters(cm), cm)
    before = _state(s.core)
    arrays = [np.full(sh, 9.0, np.float32) for sh in SHAPES]
    res = [(proxies[0], FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1, {"partition-id": 3}))]
    _, metrics = s.aggregate_fit(1, res, [])
    assert metrics["rejected"] == 1
    _assert_same_state(before, _state(s.core))
    assert len(ins) == M and not math.isnan(metrics["failures"])
