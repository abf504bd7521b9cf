"""Bad inputs to FedMeZO and LoRA FedAvg (issue 13): impossible settings fail before training with
the setting and the value named; tampered replies are rejected before they touch the state
(``on_bad_reply="drop"``: the round ends as if the reply never came; ``"raise"``: ReplyError and
the state is unchanged)."""

import copy
import math

import numpy as np
import pytest

from flwr_strategies.core.messages import Reply
from flwr_strategies.core.validation import ReplyError
from flwr_strategies.fedmezo import FedMeZOConfig, FedMeZOServer, LoRAFedAvgConfig, LoRAFedAvgServer
from flwr_strategies.fedmezo.engine import direction_seed
from flwr_strategies.fedmezo.replay import PAIR_DTYPE, encode_pairs
from flwr_strategies.fedmezo.strategy import FedMeZO, LoRAFedAvg
from flwr_strategies.fedmezo.zseed import derive_seed
from flwr_strategies.registry import get_method, resolve_params
from flwr_strategies.setup import ServerSetup, TrainConfig

# ----------------------------------------------------------------------------- settings
SETTINGS = [
    # (method, --set parameters, TrainConfig fields, text the error must contain)
    ("fedmezo", {"num_perturbations": "0"}, {}, "num_perturbations must be an integer >= 1, got 0"),
    ("fedmezo", {"z_device": "tpu"}, {}, "z_device must be one of ('cpu', 'param'), got 'tpu'"),
    ("fedmezo", {"restore_mode": "foo"}, {}, "restore_mode must be one of ('snapshot', 'regenerate'), got 'foo'"),
    ("fedmezo", {}, {"lr": math.inf}, "lr must be a finite number, got inf"),
    ("fedmezo", {"mu": "0"}, {}, "mu must be > 0.0, got 0.0"),
    ("fedmezo", {"mu": "-1e-3"}, {}, "mu must be > 0.0, got -0.001"),
    ("fedmezo", {"mu": "nan"}, {}, "mu must be a finite number, got nan"),
    ("fedmezo", {}, {"weight_decay": math.nan}, "weight_decay must be a finite number, got nan"),
    ("fedmezo", {"lr_strategy": "fancy"}, {}, "lr_strategy must be one of"),
    ("fedmezo", {"comm_mode": "zip"}, {}, "comm_mode must be one of ('params', 'seeds'), got 'zip'"),
    ("fedmezo", {"comm_mode": "seeds"}, {"weight_decay": 0.1}, "comm_mode='seeds' needs weight_decay=0"),
    ("fedmezo", {"comm_mode": "seeds", "z_device": "param"}, {}, "comm_mode='seeds' needs z_device='cpu'"),
    ("fedmezo", {"comm_mode": "seeds"}, {"local_steps": None, "local_epochs": 1}, "comm_mode='seeds' needs local_steps"),
    ("fedmezo", {"lr_strategy": "model-diff", "lr_alpha": "1e-3"}, {"lr": 1e-4}, "lr_alpha must be < lr"),
    ("fedmezo", {"lr_strategy": "random", "lr_alpha_rel": "1.5"}, {}, "lr_alpha_rel must be < 1.0, got 1.5"),
    ("fedmezo", {"lr_window": "0"}, {}, "lr_window must be an integer >= 1, got 0"),
    ("fedmezo", {"weighting": "median"}, {}, "weighting must be one of ('uniform', 'num_examples'), got 'median'"),
    ("fedmezo", {"eval_every": "0"}, {}, "eval_every must be an integer >= 1, got 0"),
    ("fedmezo", {}, {"momentum": 0.9}, "fedmezo: momentum=0.9 is not supported"),
    ("fedmezo", {}, {"grad_clip": 1.0}, "fedmezo: grad_clip=1.0 is not supported"),
    ("lora-fedavg", {}, {"lr": math.inf}, "lr must be a finite number, got inf"),
    ("lora-fedavg", {}, {"weight_decay": math.inf}, "weight_decay must be a finite number, got inf"),
    ("lora-fedavg", {"eval_every": "-2"}, {}, "eval_every must be an integer >= 1, got -2"),
]


def _setup(**train) -> ServerSetup:
    t = dict(lr=2e-4, local_epochs=None, local_steps=30, batch_size=1, weight_decay=0.0, momentum=0.0, lr_decay=1.0,
             grad_clip=None)
    t.update(train)
    tc = TrainConfig.__new__(TrainConfig)  # bypass TrainConfig's own (partial) checks: test ours
    tc.__dict__.update(t)
    return ServerSetup(initial_parameters=[], evaluate_fn=None, num_clients=3, fraction_fit=1.0, num_rounds=2, seed=0,
                       train=tc, model_fn=None, fit_config=lambda r: {})


@pytest.mark.parametrize("method,params,train,message", SETTINGS)
def test_impossible_settings_fail_naming_the_value(method, params, train, message):
    resolved = resolve_params(get_method(method), params)
    with pytest.raises(ValueError) as err:
        get_method(method).configs(resolved, _setup(**train))
    assert message in str(err.value)


DIRECT = [
    (FedMeZOConfig, {"lr": math.nan}, "lr must be a finite number, got nan"),
    (FedMeZOConfig, {"local_steps": 0}, "local_steps must be an integer >= 1, got 0"),
    (FedMeZOConfig, {"local_steps": 30, "local_epochs": 1}, "local_epochs must be None when local_steps is set (local_steps=30), got 1"),
    (FedMeZOConfig, {"local_steps": None}, "local_steps must be an integer >= 1 when local_epochs is not set"),
    (FedMeZOConfig, {"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    (FedMeZOConfig, {"lr_decay": 1.5}, "lr_decay must be <= 1.0, got 1.5"),
    (FedMeZOConfig, {"num_perturbations": 1.5}, "num_perturbations must be an integer >= 1, got 1.5"),
    (LoRAFedAvgConfig, {"momentum": 1.0}, "momentum must be < 1.0, got 1.0"),
    (LoRAFedAvgConfig, {"grad_clip": -1.0}, "grad_clip must be > 0.0, got -1.0"),
    (LoRAFedAvgConfig, {"lr": 0.0}, "lr must be > 0.0, got 0.0"),
]


@pytest.mark.parametrize("cls,kw,message", DIRECT)
def test_config_rejects(cls, kw, message):
    with pytest.raises(ValueError) as err:
        cls(**kw)
    assert message in str(err.value)


def _model():
    rng = np.random.default_rng(0)
    return {"base.weight": rng.normal(size=(4, 4)).astype(np.float32),
            "q.lora_A.weight": rng.normal(size=(2, 4)).astype(np.float32),
            "q.lora_B.weight": np.zeros((4, 2), np.float32),
            "steps": np.array(3, dtype=np.int64)}


STRATEGY_ARGS = [
    (FedMeZO, {"trainable": [1, 7]}, "trainable positions must be integers in 0..3, got 7"),
    (FedMeZO, {"trainable": [3]}, "trainable array 3 has dtype int64, not floating"),
    (FedMeZO, {"trainable": [1, 1]}, "trainable positions repeat"),
    (FedMeZO, {"trainable": ["q.lora_C.weight"]}, "trainable names ['q.lora_C.weight'] are not in the model's arrays"),
    (FedMeZO, {"mu": -1.0}, "mu must be > 0.0, got -1.0"),
    (LoRAFedAvg, {"fraction_fit": 0.0}, "LoRAFedAvg: fraction_fit must be in (0, 1], got 0.0"),
    (LoRAFedAvg, {"num_rounds": -1}, "final_round must be an integer >= 0 or None, got -1"),
]


@pytest.mark.parametrize("cls,kw,message", STRATEGY_ARGS)
def test_strategy_constructor_rejects(cls, kw, message):
    with pytest.raises(ValueError) as err:
        cls(initial_parameters=_model(), **kw)
    assert message in str(err.value)


def test_unnamed_model_needs_trainable():
    with pytest.raises(ValueError, match="trainable is required"):
        FedMeZO(initial_parameters=list(_model().values()))


def test_lm_settings_rejected_before_training():
    from flwr_strategies.simulations.lm.task import LMSettings

    base = resolve_params(get_method("fedmezo"), {})
    for key, value, message in [("lora_r", 0, "lora_r must be an integer >= 1, got 0"),
                                ("lora_dropout", 1.0, "lora_dropout must be a finite number in [0.0, 1.0), got 1.0"),
                                ("adapter_dtype", "fp8", "adapter_dtype must be one of ('fp32', 'fp16', 'bf16'), got 'fp8'"),
                                ("base_dtype", "int8", "base_dtype must be one of"),
                                ("max_len", 2, "max_len must be an integer >= 8, got 2"),
                                ("test_fraction", 1.0, "test_fraction must be a finite number in (0.0, 1.0), got 1.0"),
                                ("lora_targets", " , ", "lora_targets must name at least one module"),
                                ("model_dir", "/nonexistent/llama", "model folder /nonexistent/llama does not exist")]:
        with pytest.raises((ValueError, FileNotFoundError)) as err:
            LMSettings.from_params({**base, key: value})
        assert message in str(err.value), key


def test_cli_run_fails_before_the_first_round():
    from flwr_strategies.simulations.experiment import ExperimentConfig
    from flwr_strategies.simulations.runner import run_experiment

    cfg = ExperimentConfig(method="fedmezo", num_clients=3, rounds=2, lr=2e-4, local_epochs=None, local_steps=2,
                           batch_size=1, params={"n_examples": 40, "z_device": "tpu"}, progress=False)
    with pytest.raises(ValueError, match="z_device must be one of .*got 'tpu'"):
        run_experiment(cfg)


# ----------------------------------------------------------------------------- tampered replies
H = 3


def _core(comm_mode="params", weighting="uniform", cls=FedMeZOServer):
    model = _model()
    if cls is FedMeZOServer:
        config = FedMeZOConfig(lr=1e-3, local_steps=H, comm_mode=comm_mode, weighting=weighting,
                               lr_strategy="round-wise", lr_alpha_rel=0.5)
    else:
        config = LoRAFedAvgConfig(lr=1e-3, local_steps=H, weighting=weighting)
    core = cls(list(model.values()), trainable=[1, 2], config=config, num_partitions=3, seed=5)
    core.configure_train(1, [0, 1])
    return core


def _good(core, pid, r=1):
    if getattr(core.config, "comm_mode", "params") == "seeds":
        pairs = [(derive_seed(core.seed, r, pid, k), 0.1 * (k + 1)) for k in range(H)]
        return Reply(pid, [], H, {"train_loss": 1.0 + pid, "zo_pairs": encode_pairs(pairs)})
    return Reply(pid, [a + 0.01 * (pid + 1) for a in core.current], H, {"train_loss": 1.0 + pid})


def _with(reply, **kw):
    out = copy.deepcopy(reply)
    for k, v in kw.items():
        setattr(out, k, v)
    return out


def _arrays(core, fn):
    good = _good(core, 1)
    return _with(good, arrays=fn([a.copy() for a in good.arrays]))


def _pairs(core, fn):
    good = _good(core, 1)
    rec = np.frombuffer(good.metrics["zo_pairs"], dtype=PAIR_DTYPE).copy()
    return _with(good, metrics={**good.metrics, "zo_pairs": fn(rec)})


def _set(a, idx, value):
    a[idx] = value
    return a


TAMPERED = [
    # (label, comm_mode, weighting, builder(core) -> bad reply, text of the rejection)
    ("wrong LoRA shape", "params", "uniform", lambda c: _arrays(c, lambda a: [np.ones((1, 1), np.float32), a[1]]),
     "array 0 has shape (1, 1), expected (2, 4)"),
    ("NaN LoRA", "params", "uniform", lambda c: _arrays(c, lambda a: [_set(a[0], (0, 0), np.nan), a[1]]),
     "array 0 contains NaN or infinite values"),
    ("inf LoRA", "params", "uniform", lambda c: _arrays(c, lambda a: [a[0], _set(a[1], (1, 1), np.inf)]),
     "array 1 contains NaN or infinite values"),
    ("missing array", "params", "uniform", lambda c: _arrays(c, lambda a: a[:1]), "expected 2 arrays, got 1"),
    ("whole model instead of adapters", "params", "uniform",
     lambda c: _arrays(c, lambda a: list(_model().values())), "expected 2 arrays, got 4"),
    ("integer dtype", "params", "uniform", lambda c: _arrays(c, lambda a: [a[0].astype(np.int32), a[1]]),
     "array 0 has dtype int32, expected float32"),
    ("partition -1", "params", "uniform", lambda c: _with(_good(c, 1), partition_id=-1), "partition id -1 is outside 0..2"),
    ("unsampled partition", "params", "uniform", lambda c: _with(_good(c, 1), partition_id=2),
     "partition 2 was not sampled this round"),
    ("duplicate partition", "params", "uniform", lambda c: _with(_good(c, 0)), "second reply from partition 0"),
    ("NaN train_loss", "params", "uniform", lambda c: _with(_good(c, 1), metrics={"train_loss": float("nan")}),
     "metric 'train_loss' = nan is not a finite number"),
    ("negative num_examples", "params", "uniform", lambda c: _with(_good(c, 1), num_examples=-3),
     "num_examples -3 is not an integer >= 0"),
    ("zero examples, weighted mean", "params", "num_examples", lambda c: _with(_good(c, 1), num_examples=0),
     "reported num_examples = 0"),
    ("seed pairs: bad byte count", "seeds", "uniform", lambda c: _pairs(c, lambda r: r.tobytes()[:-3]),
     "not a multiple of 16"),
    ("seed pairs: foreign seed", "seeds", "uniform", lambda c: _pairs(c, lambda r: _set(r, 1, (12345, 0.1)).tobytes()),
     "has seed 12345, not one of this round's MeZO seeds"),
    ("seed pairs: repeated step", "seeds", "uniform", lambda c: _pairs(c, lambda r: r[[0, 0, 1]].tobytes()),
     "out of order or repeated"),
    ("seed pairs: NaN coefficient", "seeds", "uniform",
     lambda c: _pairs(c, lambda r: _set(r, 2, (r[2]["seed"], np.nan)).tobytes()), "non-finite coefficient"),
    ("seed pairs: too many", "seeds", "uniform", lambda c: _pairs(c, lambda r: np.concatenate([r, r]).tobytes()),
     "6 (seed, coefficient) pairs for 3 steps"),
    ("seed pairs: missing", "seeds", "uniform", lambda c: _with(_good(c, 1), metrics={"train_loss": 1.0}),
     "needs the bytes metric 'zo_pairs'"),
    ("seed pairs: overflowing replay", "seeds", "uniform",
     lambda c: _pairs(c, lambda r: _set(r, 0, (r[0]["seed"], 1e300)).tobytes()), "replaying its pairs gives non-finite"),
    ("seed mode: arrays uploaded", "seeds", "uniform",
     lambda c: _with(_good(c, 1), arrays=[a.copy() for a in c.current]), "expected 0 arrays, got 2"),
]


def _same_state(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("label,comm_mode,weighting,bad,message", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_tampered_reply_is_rejected_before_the_state_changes(label, comm_mode, weighting, bad, message):
    # drop: the round ends exactly as a round with only the good reply
    core, twin = _core(comm_mode, weighting), _core(comm_mode, weighting)
    good = _good(core, 0)
    out = core.train_round(1, [good, bad(core)], sampled=[0, 1], on_bad_reply="drop")
    twin.train_round(1, [_good(twin, 0)], sampled=[0, 1], on_bad_reply="drop")
    assert out["rejected"] == 1 and out["failures"] == 1
    assert message in str(out.rejections[0])
    assert _same_state(core.state_dict(), twin.state_dict())
    # raise: ReplyError naming the problem, nothing changed
    core = _core(comm_mode, weighting)
    before = core.state_dict()
    with pytest.raises(ReplyError, match="round 1"):
        core.train_round(1, [_good(core, 0), bad(core)], sampled=[0, 1], on_bad_reply="raise")
    assert _same_state(core.state_dict(), before)


def test_good_seed_pairs_are_accepted_and_replayed():
    core = _core("seeds")
    out = core.train_round(1, [_good(core, 0), _good(core, 1)], sampled=[0, 1], on_bad_reply="raise")
    assert out["rejected"] == 0 and not np.array_equal(core.current[1], _model()["q.lora_B.weight"])
    # directions j > 0 of a step come right after j = 0
    cfg = FedMeZOConfig(lr=1e-3, local_steps=2, comm_mode="seeds", num_perturbations=2)
    core2 = FedMeZOServer(list(_model().values()), trainable=[1, 2], config=cfg, num_partitions=3, seed=5)
    core2.configure_train(1, [0])
    s = [derive_seed(5, 1, 0, k) for k in range(2)]
    pairs = [(s[0], 0.1), (direction_seed(s[0], 1), 0.2), (s[1], 0.3), (direction_seed(s[1], 1), 0.1)]
    assert core2.train_round(1, [Reply(0, [], 2, {"zo_pairs": encode_pairs(pairs)})], sampled=[0],
                             on_bad_reply="raise")["rejected"] == 0
    with pytest.raises(ReplyError, match="the last step has 1 of 2 directions"):
        core2.configure_train(2, [0])
        s2 = derive_seed(5, 2, 0, 0)
        core2.train_round(2, [Reply(0, [], 2, {"zo_pairs": encode_pairs([(s2, 0.1)])})], sampled=[0],
                          on_bad_reply="raise")


def test_lora_fedavg_rejects_tampered_shapes():
    core, twin = _core(cls=LoRAFedAvgServer), _core(cls=LoRAFedAvgServer)
    bad = _arrays(core, lambda a: [a[0].reshape(4, 2), a[1]])
    out = core.train_round(1, [_good(core, 0), bad], sampled=[0, 1], on_bad_reply="drop")
    twin.train_round(1, [_good(twin, 0)], sampled=[0, 1])
    assert out["rejected"] == 1 and _same_state(core.state_dict(), twin.state_dict())
