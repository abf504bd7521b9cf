"""Issue 13 done-when 3 for DO-ADP, D-mSGD, DPDO, DP-DDA and CPGT: a table of bad inputs.

Impossible settings raise before training with an error naming the setting and the value (nothing
is clamped). Tampered replies to the raw cores are rejected before any state changes: under
``on_bad_reply="raise"`` with a ``ReplyError`` and the whole ``state_dict()`` unchanged, under
``"drop"`` as a failed agent with every method table unchanged.
"""

import copy
import math

import numpy as np
import pytest

from flwr_strategies.core.messages import Reply
from flwr_strategies.core.validation import ReplyError
from flwr_strategies.doadp.baseline_server import CPGTServer, DPDDAServer, DPDOServer
from flwr_strategies.doadp.config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from flwr_strategies.doadp.server import DMSGDServer, DOADPServer

N, D, Q = 4, 40, 50

# ------------------------------------------------------------------------------ hyperparameters
CONFIG_ROWS = [
    (DOADPConfig, dict(epsilon=0.0), "epsilon must be > 0, got 0.0"),
    (DOADPConfig, dict(epsilon=-1.0), "epsilon must be > 0, got -1.0"),
    (DOADPConfig, dict(epsilon=math.nan), "epsilon"),
    (DOADPConfig, dict(epsilon=math.inf), "epsilon must be a finite number, got inf"),
    (DOADPConfig, dict(epsilon=2.0), "epsilon=2.0"),  # Theorem 1 needs epsilon <= 1
    (DOADPConfig, dict(delta=0.0), "delta must be > 0, got 0.0"),
    (DOADPConfig, dict(delta=1.0), "delta must be < 1, got 1.0"),
    (DOADPConfig, dict(delta=math.nan), "delta"),
    (DOADPConfig, dict(k_frac=0.0), "k_frac must be > 0, got 0.0"),
    (DOADPConfig, dict(k_frac=-1.0), "k_frac must be > 0, got -1.0"),
    (DOADPConfig, dict(k_frac=2.0), "k_frac must be <= 1, got 2.0"),
    (DOADPConfig, dict(p=0.0), "p must be > 0, got 0.0"),
    (DOADPConfig, dict(p=1.2), "p must be <= 1, got 1.2"),
    (DOADPConfig, dict(p=0.3), "p=0.3"),
    (DOADPConfig, dict(p=math.nan), "p"),
    (DOADPConfig, dict(gamma=-0.05), "gamma must be > 0, got -0.05"),
    (DOADPConfig, dict(beta=1.0), "beta must be < 1, got 1.0"),
    (DOADPConfig, dict(clip=0.0), "clip must be > 0, got 0.0"),
    (DOADPConfig, dict(clip=math.inf), "clip must be a finite number, got inf"),
    (DOADPConfig, dict(sigma=-1.0), "sigma must be > 0, got -1.0"),
    (DOADPConfig, dict(delta0=1.5), "delta0 must be < 1, got 1.5"),
    (DOADPConfig, dict(calibration="loose"), "calibration must be one of .*got 'loose'"),
    (DOADPConfig, dict(sampling="shuffle"), "sampling must be one of .*got 'shuffle'"),
    (DOADPConfig, dict(clip_mode="l1"), "clip_mode must be one of .*got 'l1'"),
    (DOADPConfig, dict(public_copy="random"), "public_copy must be one of .*got 'random'"),
    (DOADPConfig, dict(eval_every=0), "eval_every must be an integer >= 1, got 0"),
    (DMSGDConfig, dict(beta=-0.1), "beta must be >= 0, got -0.1"),
    (DPDOConfig, dict(rs=0.999, rn=0.99), "rs=0.999"),
    (DPDOConfig, dict(epsilon=0.0), "epsilon must be > 0, got 0.0"),
    (DPDDAConfig, dict(p_s=0.0), "p_s must be > 0, got 0.0"),
    (DPDDAConfig, dict(delta=1.0), "delta must be < 1, got 1.0"),
    (CPGTConfig, dict(k_frac=0.0), "k_frac must be > 0, got 0.0"),
    (CPGTConfig, dict(a=1.5), "a must be <= 1, got 1.5"),
]


@pytest.mark.parametrize("cls,kw,match", CONFIG_ROWS, ids=[f"{c.__name__}-{list(k)[0]}={list(k.values())[0]}"
                                                         for c, k, _ in CONFIG_ROWS])
def test_impossible_setting_is_rejected(cls, kw, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace("[", r"\[")):
        cls(**kw)


def _arrays():
    return [np.zeros((D // 2,), np.float32), np.zeros((2, D // 4), np.float32)]


SERVER_ROWS = [
    (dict(config=DOADPConfig(k_frac=0.001)), "k_frac=0.001"),  # round(0.001 * 40) = 0 coordinates
    (dict(batch_size=Q + 1), "batch_size=51"),
    (dict(alpha=0.0), "alpha must be positive and finite or 'auto', got 0.0"),
    (dict(alpha=math.nan), "alpha must be positive and finite or 'auto', got nan"),
    (dict(num_rounds=0), "num_rounds must be an integer >= 1, got 0"),
    (dict(lr_decay=0.0), r"lr_decay must be in \(0, 1\], got 0.0"),
    (dict(graph=DOADPServer.default_graph(topology="random", neighbours=3)), "redrawn every round"),
    (dict(config=DOADPConfig(sigma=1e-3)), "above the target epsilon"),  # given noise certifies too little
]


@pytest.mark.parametrize("kw,match", SERVER_ROWS, ids=[m for _, m in SERVER_ROWS])
def test_impossible_server_setting_is_rejected(kw, match):
    args = dict(num_partitions=N, num_rounds=5, dataset_size=Q, batch_size=4)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        DOADPServer(_arrays(), **args)


def test_integer_buffers_rejected():
    with pytest.raises(ValueError, match="floating-point parameters only"):
        DOADPServer(_arrays() + [np.zeros(1, np.int64)], num_partitions=N, num_rounds=5, dataset_size=Q, batch_size=4)


def test_registered_settings_rejected_before_training():
    from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment

    base = dict(dataset="digits", num_clients=3, rounds=2, local_steps=1, batch_size=4, model="logreg")
    for method, over, match in [
        ("doadp", dict(params={"epsilon": -1.0}), "epsilon must be > 0, got -1.0"),
        ("doadp", dict(params={"epsilon": "nan"}), "epsilon"),
        ("doadp", dict(params={"k_frac": 2.0}), "k_frac must be <= 1, got 2.0"),
        ("doadp", dict(momentum=0.9), "momentum=0.9"),
        ("doadp", dict(weight_decay=1e-4), "weight_decay=0.0001"),
        ("doadp", dict(fraction_fit=0.5), "fraction_fit=0.5"),
        ("dmsgd", dict(local_steps=5), "local_steps=5"),
        ("dpdo", dict(lr_decay=0.99), "lr_decay"),
    ]:
        cfg = ExperimentConfig(method=method, **{**base, **over})
        with pytest.raises(ValueError, match=match):
            get_experiment(cfg).build_strategy()


# ------------------------------------------------------------------------------ tampered replies
def _doadp():
    core = DOADPServer(_arrays(), num_partitions=N, num_rounds=5, dataset_size=Q, batch_size=4,
                       config=DOADPConfig(k_frac=0.25, calibration="accountant"))
    core.configure_train(1, list(range(N)))
    return core


def _good(core, pid=0):
    k = core.k
    return Reply(pid, [np.arange(k, dtype=np.uint16) * 2, np.full(k, 0.5, np.float32)], Q, {"doadp_active": 1})


def _tamper(core, what):
    k, d = core.k, core.d
    idx = np.arange(k, dtype=np.int64)
    val = np.ones(k, np.float32)
    A = {"doadp_active": 1}
    none = [np.empty(0, np.uint16), np.empty(0, np.float32)]
    return {
        "three arrays": Reply(1, [idx, val, val], Q, A),
        "one array": Reply(1, [idx], Q, A),
        "no arrays": Reply(1, [], Q, A),
        "no arrays, inactive": Reply(1, [], Q, {"doadp_active": 0}),
        "float indices": Reply(1, [idx.astype(np.float64), val], Q, A),
        "bool indices": Reply(1, [np.ones(k, bool), val], Q, A),
        "negative index": Reply(1, [np.r_[-1, idx[1:]], val], Q, A),
        "index out of range": Reply(1, [np.r_[idx[:-1], d], val], Q, A),
        "duplicate index": Reply(1, [np.r_[idx[:-1], 0], val], Q, A),
        "k-1 indices": Reply(1, [idx[:-1], val[:-1]], Q, A),
        "k+1 indices": Reply(1, [np.arange(k + 1), np.ones(k + 1, np.float32)], Q, A),
        "2-D indices": Reply(1, [idx.reshape(1, -1), val.reshape(1, -1)], Q, A),
        "integer values": Reply(1, [idx, np.ones(k, np.int64)], Q, A),
        "float64 values": Reply(1, [idx, val.astype(np.float64)], Q, A),
        "float16 values": Reply(1, [idx, val.astype(np.float16)], Q, A),
        "NaN value": Reply(1, [idx, np.r_[np.nan, val[1:]].astype(np.float32)], Q, A),
        "inf value": Reply(1, [idx, np.r_[np.inf, val[1:]].astype(np.float32)], Q, A),
        "partition -1": Reply(-1, [idx, val], Q, A),
        "partition n": Reply(N, [idx, val], Q, A),
        "float partition": Reply(1.0, [idx, val], Q, A),
        "negative num_examples": Reply(1, [idx, val], -3, A),
        "no active flag": Reply(1, [idx, val], Q, {}),
        "active flag 5": Reply(1, [idx, val], Q, {"doadp_active": 5}),
        "empty arrays said active": Reply(1, none, Q, A),
        "message said inactive": Reply(1, [idx, val], Q, {"doadp_active": 0}),
        "inactive float64 values": Reply(1, [none[0], np.empty(0, np.float64)], Q, {"doadp_active": 0}),
    }[what]


TAMPERED = ["three arrays", "one array", "no arrays", "no arrays, inactive", "float indices", "bool indices",
            "negative index", "index out of range", "duplicate index", "k-1 indices", "k+1 indices", "2-D indices",
            "integer values", "float64 values", "float16 values", "NaN value", "inf value", "partition -1",
            "partition n", "float partition", "negative num_examples", "no active flag", "active flag 5",
            "empty arrays said active", "message said inactive", "inactive float64 values"]


def test_an_inactive_agent_says_so_and_is_not_a_failure():
    # the explicit inactive reply (two empty arrays of the message's dtypes, doadp_active = 0) is accepted
    core = _doadp()
    inactive = Reply(1, [np.empty(0, np.uint16), np.empty(0, np.float32)], Q, {"doadp_active": 0})
    out = core.train_round(1, [_good(core), inactive], sampled=range(N), on_bad_reply="raise")
    assert out["active"] == 1 and out["inactive"] == 1 and out["rejected"] == 0


@pytest.mark.parametrize("what", ["no arrays", "no arrays, inactive"])
def test_a_reply_with_no_arrays_is_rejected_naming_it(what):
    core = _doadp()
    with pytest.raises(ReplyError, match="got 0 arrays"):
        core.train_round(1, [_tamper(core, what)], sampled=range(N), on_bad_reply="raise")


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_topk_values_need_the_exact_message_dtype(dtype):
    core = _doadp()
    with pytest.raises(ReplyError, match=f"must have dtype float32 .*got {dtype}"):
        core.train_round(1, [_tamper(core, f"{dtype} values")], sampled=range(N), on_bad_reply="raise")


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("what", TAMPERED)
def test_tampered_reply_raise_leaves_state(what):
    core = _doadp()
    before = copy.deepcopy(core.state_dict())
    with pytest.raises(ReplyError):
        core.train_round(1, [_good(core), _tamper(core, what)], sampled=range(N), on_bad_reply="raise")
    assert _same(before, core.state_dict())


@pytest.mark.parametrize("what", TAMPERED)
def test_tampered_reply_drop_leaves_tables(what):
    core = _doadp()
    before = copy.deepcopy(core.state_dict()["method"])
    out = core.train_round(1, [_tamper(core, what)], sampled=range(N), on_bad_reply="drop")
    assert out["rejected"] == 1 and out.get("active", 0) == 0  # an all-rejected round aggregates nothing
    assert _same(before, core.state_dict()["method"])


def test_duplicate_and_unsampled_partitions_rejected():
    core = _doadp()
    before = copy.deepcopy(core.state_dict())
    with pytest.raises(ReplyError, match="second reply"):
        core.train_round(1, [_good(core, 2), _good(core, 2)], sampled=range(N), on_bad_reply="raise")
    with pytest.raises(ReplyError, match="not sampled"):
        core.train_round(1, [_good(core, 3)], sampled=[0, 1, 2], on_bad_reply="raise")
    assert _same(before, core.state_dict())


def test_rejected_message_leaves_public_copies_untouched_atomic():
    core = _doadp()
    XHAT = core.XHAT.copy()
    out = core.train_round(1, [_good(core, 0), _tamper(core, "duplicate index")], sampled=range(N), on_bad_reply="drop")
    assert out["rejected"] == 1 and out["active"] == 1
    assert np.array_equal(core.XHAT[1:], XHAT[1:])  # the tampering agent's copy (and everyone else's) untouched
    assert not np.array_equal(core.XHAT[0], XHAT[0])  # the good message was applied
    assert core.accepted.tolist() == [1, 0, 0, 0]


def test_private_model_report_checked():
    core = DOADPServer(_arrays(), num_partitions=N, num_rounds=5, dataset_size=Q, batch_size=4,
                       config=DOADPConfig(k_frac=0.25, calibration="accountant", evaluate_private=True, eval_every=1))
    before = copy.deepcopy(core.state_dict())
    k = core.k
    bad = Reply(0, [np.arange(k), np.ones(k, np.float32), np.zeros(D + 1)], Q, {})
    with pytest.raises(ReplyError, match="private model"):
        core.train_round(1, [bad], sampled=range(N), on_bad_reply="raise")
    assert _same(before, core.state_dict())


BASELINE_ROWS = [
    (DPDOServer, DPDOConfig(), lambda d, k: [np.zeros(d + 1)], "float vector of length"),
    (DPDOServer, DPDOConfig(), lambda d, k: [np.r_[np.nan, np.zeros(d - 1)]], "NaN"),
    (DPDDAServer, DPDDAConfig(calibration="accountant"), lambda d, k: [np.zeros(d, np.int64)], "float vector"),
    (DPDDAServer, DPDDAConfig(calibration="accountant"), lambda d, k: [np.zeros(d), np.zeros(d)], "one float vector"),
    (CPGTServer, CPGTConfig(k_frac=0.25), lambda d, k: [np.arange(k) * 0, np.ones(k), np.arange(k), np.ones(k)],
     "distinct"),
    (CPGTServer, CPGTConfig(k_frac=0.25), lambda d, k: [np.arange(k), np.ones(k)], "4 arrays"),
    (CPGTServer, CPGTConfig(k_frac=0.25), lambda d, k: [np.arange(k) + d, np.ones(k), np.arange(k), np.ones(k)],
     "in \\[0, 40\\)"),
]


@pytest.mark.parametrize("cls,cfg,arrays,match", BASELINE_ROWS)
def test_baseline_tampered_reply(cls, cfg, arrays, match):
    core = cls(_arrays(), num_partitions=N, num_rounds=5, dataset_size=Q, batch_size=4, config=cfg)
    core.configure_train(1, list(range(N)))
    before = copy.deepcopy(core.state_dict())
    k = getattr(core, "k", 1)
    with pytest.raises(ReplyError, match=match):
        core.train_round(1, [Reply(1, arrays(core.d, k), Q, {})], sampled=range(N), on_bad_reply="raise")
    assert _same(before, core.state_dict())
    method_before = copy.deepcopy(core.state_dict()["method"])
    out = core.train_round(1, [Reply(1, arrays(core.d, k), Q, {})], sampled=range(N), on_bad_reply="drop")
    assert out["rejected"] == 1
    for key in ("Y", "Z", "Hx", "Hy"):
        if key in method_before:
            assert np.array_equal(method_before[key], core.state_dict()["method"][key])


def test_doadp_client_refuses_a_non_private_round():
    from flwr_strategies.clients.doadp import DOADPAgent

    cfg = {"t": 0, "doadp_private": 1, "doadp_alpha": 0.1, "doadp_beta": 0.1, "doadp_p": 1.0, "doadp_k": 2,
           "doadp_sigma": 0.0, "doadp_clip": 1.0, "doadp_clip_mode": "coordinate", "doadp_batch_size": 1,
           "doadp_sampling": "uniform", "doadp_msg_dtype": "float32", "doadp_public_copy": "zero", "doadp_accepted": 0}
    with pytest.raises(ValueError, match="refuses a non-private round"):
        DOADPAgent([np.zeros(4), np.zeros(4)], cfg)
    with pytest.raises(ValueError, match="refuses a non-private round"):
        DOADPAgent([np.zeros(4), np.zeros(4)], {**cfg, "doadp_sigma": 1.0, "doadp_clip": -1.0})
    with pytest.raises(ValueError, match="refuses a non-private round"):
        DOADPAgent([np.zeros(4), np.zeros(4)], {**cfg, "doadp_sigma": 1.0, "doadp_private": 0})


def test_dmsgd_is_the_only_non_private_method():
    core = DMSGDServer(_arrays(), num_partitions=N, num_rounds=3, dataset_size=Q, batch_size=4, config=DMSGDConfig())
    ins = core.configure_train(1, list(range(N)))
    assert ins[0].config["doadp_private"] == 0 and ins[0].config["doadp_sigma"] == 0.0
    # a DO-ADP core never sends a non-private round
    core = _doadp()
    ins = core.configure_train(1, list(range(N)))
    assert all(i.config["doadp_private"] == 1 and i.config["doadp_sigma"] > 0 for i in ins)
