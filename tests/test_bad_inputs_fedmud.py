"""Bad inputs to FedMUD and its baselines (issue 13): each impossible setting is rejected before
training with an error naming the setting and the value; each tampered reply is dropped (counted,
the state exactly as if it had never arrived) or raises with the state unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from torch import nn

from fedmud_testmodels import PAPER_MODELS, tiny_net
from flwr_strategies.core.messages import Reply
from flwr_strategies.core.validation import ReplyError
from flwr_strategies.fedmud import FedMUDConfig, FedMUDServer
from flwr_strategies.registry import get_method
from flwr_strategies.fedmud.strategy import FedHM, FedLMT, FedMUD


def _init(net):
    return [v.numpy().copy() for v in net.state_dict().values()]


def _mlp():  # the default dataset's model: floor 0.275 of the whole model
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))


def _grouped():
    return nn.Sequential(nn.Conv2d(4, 8, 3), nn.Conv2d(8, 8, 3, groups=2), nn.Flatten(), nn.Linear(8, 2))


# ---------------------------------------------------------------- settings (before any training)
SETTINGS = [
    ("base_std=inf", lambda: FedMUDConfig(base_std=math.inf), r"base_std must be a finite number > 0, got inf"),
    ("base_std=0", lambda: FedMUDConfig(base_std=0.0), r"base_std must be a finite number > 0, got 0"),
    ("reset_interval<0", lambda: FedMUDConfig(reset_interval=-1), r"reset_interval must be an integer >= 1 .*got -1"),
    ("reset_interval=nan", lambda: FedMUDConfig(reset_interval=math.nan), r"reset_interval must be .*got nan"),
    ("reset_interval=1.5", lambda: FedMUDConfig(reset_interval=1.5), r"reset_interval must be .*got 1\.5"),
    ("registry reset_interval<0", lambda: get_method("fedmud").configs({"reset_interval": -2}),
     r"reset_interval must be an integer >= 1 or None \(never reset\), got -2"),
    ("target_ratio=0", lambda: FedMUDConfig(target_ratio=0.0), r"target_ratio must be in \(0, 1\], got 0"),
    ("target_ratio=nan", lambda: FedMUDConfig(target_ratio=math.nan), r"target_ratio must be in \(0, 1\], got nan"),
    ("target_ratio>1", lambda: FedMUDConfig(target_ratio=1.5), r"target_ratio must be in \(0, 1\], got 1\.5"),
    ("fallback_ratio=-1", lambda: FedMUDConfig(fallback_ratio=-1.0), r"fallback_ratio must be in \(0, 1\], got -1"),
    ("unreachable ratio", lambda: FedMUD(model=_mlp(), initial_parameters=_init(_mlp())),
     r"target_ratio=0\.03125 is unreachable .* smallest reachable whole-model ratio is 0\.28364.*strict_ratio=False"),
    ("unreachable fallback", lambda: FedMUD(model=_mlp(), initial_parameters=_init(_mlp()), fallback_ratio=0.2),
     r"fallback_ratio=0\.2 are both unreachable .* 0\.28364"),
    ("unreachable SVHN 1/32 (code accepts the floor)", lambda: FedMUD(model=PAPER_MODELS["svhn"](),
                                                                      initial_parameters=_init(PAPER_MODELS["svhn"]())),
     r"smallest reachable whole-model ratio is 0\.03528"),
    ("unknown decomp", lambda: FedMUDConfig(decomp="svd"), r"decomp must be one of .* got 'svd'"),
    ("unknown pattern", lambda: FedMUDConfig(pattern="abc"), r"pattern must be one of .* got 'abc'"),
    ("hadamard with aad", lambda: FedMUDConfig(decomp="hadamard", pattern="aad", reset_interval=None, zero_base=True),
     r"supports only pattern='ab', got pattern='aad'"),
    ("init_scale<0", lambda: FedMUDConfig(init_scale=-1.0), r"init_scale must be a finite number > 0, got -1"),
    ("init_scale=inf", lambda: FedMUDConfig(init_scale=math.inf), r"init_scale must be a finite number > 0, got inf"),
    ("unknown init_dist", lambda: FedMUDConfig(init_dist="cauchy"), r"init_dist must be one of .* got 'cauchy'"),
    ("unknown weighting", lambda: FedMUDConfig(weighting="median"), r"weighting must be one of .* got 'median'"),
    ("unknown base_init", lambda: FedMUDConfig(base_init="xavier"), r"base_init must be one of .* got 'xavier'"),
    ("skip_first<0", lambda: FedMUDConfig(skip_first=-1), r"skip_first must be an integer >= 0, got -1"),
    ("skip_last=1.5", lambda: FedMUDConfig(skip_last=1.5), r"skip_last must be an integer >= 0, got 1\.5"),
    ("strict_ratio not a bool", lambda: FedMUDConfig(strict_ratio="no"), r"strict_ratio must be True or False, got 'no'"),
    ("zero base with resets", lambda: FedLMT(model=tiny_net(), initial_parameters=_init(tiny_net()), reset_interval=2),
     r"zero_base needs reset_interval=None .*got reset_interval=2"),
    ("FedHM with BKD", lambda: FedHM(model=tiny_net(), initial_parameters=_init(tiny_net()), decomp="kron",
                                     target_ratio=0.5), r"fedhm=True needs decomp='mat'.*got decomp='kron'"),
    ("random_right with aad", lambda: FedMUDConfig(pattern="aad", random_right=True, reset_interval=None),
     r"random_right=True needs pattern='ab', got pattern='aad'"),
    ("unknown setting", lambda: FedMUD(model=tiny_net(), initial_parameters=_init(tiny_net()), target_ratio=0.5,
                                             rank=4),
     r"unexpected keyword argument 'rank'"),
    ("grouped conv layer", lambda: FedMUD(model=_grouped(), initial_parameters=_init(_grouped()), target_ratio=0.9),
     r"layer '1' is a grouped convolution \(groups=2\)"),
    ("initial arrays missing one", lambda: FedMUD(model=tiny_net(), initial_parameters=_init(tiny_net())[:-1]),
     r"initial_arrays has 12 arrays but the model has 13 state_dict entries"),
    ("initial array of wrong shape", lambda: FedMUD(model=tiny_net(), initial_parameters=[np.zeros((1, 1), np.float32)]
                                                    + _init(tiny_net())[1:], target_ratio=0.5),
     r"initial_arrays entry '0.weight' has shape \(1, 1\)"),
    ("model not a module", lambda: FedMUD(model="Net", initial_parameters=_init(tiny_net())),
     r"model must be a torch.nn.Module"),
]


@pytest.mark.parametrize("name,build,message", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_impossible_setting_is_rejected_before_training(name, build, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build()


# ---------------------------------------------------------------- tampered replies
def _server(method_config: FedMUDConfig) -> FedMUDServer:
    torch.manual_seed(0)
    net = tiny_net()
    return FedMUDServer(_init(net), model=net, config=method_config, num_partitions=4, seed=2)


def _good(server: FedMUDServer, pid: int) -> Reply:
    g = np.random.default_rng(pid)
    arrays = [(a + 0.01 * g.standard_normal(a.shape)).astype(a.dtype) for a in server.dm.get_payload()]
    return Reply(pid, arrays, 10 + pid, {"train_loss": 1.0})


def _with(reply: Reply, **changes) -> Reply:
    return Reply(changes.get("partition_id", reply.partition_id), changes.get("arrays", [a.copy() for a in reply.arrays]),
                 changes.get("num_examples", reply.num_examples), dict(reply.metrics))


def _set(arrays, i, value):
    out = [a.copy() for a in arrays]
    out[i] = value
    return out


def _nan(arrays, i):
    out = [a.copy() for a in arrays]
    out[i].flat[0] = np.nan
    return out


F = 7  # payload index of the first compressed layer's first factor (tiny_net: '3.parametrizations.weight.0.*')
TAMPERED = [
    ("factor of wrong shape", lambda r: _with(r, arrays=_set(r.arrays, F, np.zeros((1, 1), np.float32))), "shape"),
    ("transposed factor", lambda r: _with(r, arrays=_set(r.arrays, F, np.ascontiguousarray(r.arrays[F].T))), "shape"),
    ("one array missing", lambda r: _with(r, arrays=r.arrays[:-1]), "expected"),
    ("one array too many", lambda r: _with(r, arrays=r.arrays + [np.zeros(3, np.float32)]), "expected"),
    ("the full model instead of the factors", lambda r: _with(r, arrays=_init(tiny_net())), "expected"),
    ("NaN in a factor", lambda r: _with(r, arrays=_nan(r.arrays, F)), "NaN"),
    ("inf in a dense array", lambda r: _with(r, arrays=_set(r.arrays, 0, np.full_like(r.arrays[0], np.inf))), "NaN"),
    ("integer factor", lambda r: _with(r, arrays=_set(r.arrays, F, r.arrays[F].astype(np.int64))), "dtype"),
    ("partition id -1", lambda r: _with(r, partition_id=-1), "outside"),
    ("partition id out of range", lambda r: _with(r, partition_id=7), "outside"),
    ("partition not sampled", lambda r: _with(r, partition_id=3), "not sampled"),
    ("duplicate partition", lambda r: _with(r, partition_id=0), "second reply"),
    ("negative num_examples", lambda r: _with(r, num_examples=-5), "num_examples"),
    ("zero num_examples", lambda r: _with(r, num_examples=0), "num_examples = 0"),
]


def _same_state(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same_state(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_state(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


CONFIGS = {"fedmud": FedMUDConfig(target_ratio=0.5),
           "fedhm": FedMUDConfig(decomp="mat", pattern="ab", reset_interval=None, zero_base=True, random_right=True,
                                 fedhm=True, target_ratio=0.5)}


@pytest.mark.parametrize("method", list(CONFIGS))
@pytest.mark.parametrize("name,tamper,reason", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_tampered_reply_is_dropped_or_raises_with_state_unchanged(method, name, tamper, reason):
    assert ".parametrizations." in _server(CONFIGS[method]).payload_keys[F]
    # round 2 (a push round) with clients 0 and 1 sampled; client 1's reply is tampered
    ref, srv = _server(CONFIGS[method]), _server(CONFIGS[method])
    for s in (ref, srv):
        s.configure_train(1, [0, 1])
        s.train_round(1, [_good(s, 0), _good(s, 1)], sampled=[0, 1])
        s.configure_train(2, [0, 1])
    good0, bad = _good(srv, 0), tamper(_good(srv, 1))
    before = srv.state_dict()
    with pytest.raises(ReplyError, match=reason):
        srv.train_round(2, [good0, bad], sampled=[0, 1], on_bad_reply="raise")
    _same_state(srv.state_dict(), before)
    out = srv.train_round(2, [good0, bad], sampled=[0, 1], on_bad_reply="drop")
    ref.train_round(2, [_good(ref, 0)], sampled=[0, 1])
    assert out["rejected"] == 1
    _same_state(srv.state_dict(), ref.state_dict())
    assert 1 not in srv.confirmed or srv.confirmed[1] == ref.confirmed.get(1)


def test_nan_reply_through_the_legacy_strategy_is_dropped():
    """The drop-in path: Flower's FitRes into the legacy strategy; one NaN client cannot poison the model."""
    net = tiny_net()
    strategy = FedMUD(model=net, initial_parameters=_init(net), target_ratio=0.5)
    core = strategy.core
    ins = core.configure_train(1, [0, 1])
    strategy.session.sampled[1] = [0, 1]
    strategy._pid_of_cid = {"a": 0, "b": 1}

    class Proxy:
        def __init__(self, cid):
            self.cid = cid

    def fitres(arrays):
        return FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 10, {})

    good, bad = list(ins[0].arrays), _nan(list(ins[1].arrays), 0)
    before = core.global_arrays()
    _, metrics = strategy.aggregate_fit(1, [(Proxy("a"), fitres(good)), (Proxy("b"), fitres(bad))], [])
    assert metrics["rejected"] == 1
    assert all(np.isfinite(a).all() for a in core.global_arrays() if a.dtype.kind == "f")
    # the model moved only by client 0's (unchanged) payload: still the initial model
    for a, b in zip(core.global_arrays(), before):
        np.testing.assert_array_equal(a, b)
