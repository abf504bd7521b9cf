"""Bad inputs for FedLi-LS, FedLi-LU, FedExP and SCAFFOLD (issue 13): impossible hyperparameters fail
at construction with an error naming the setting, and tampered replies to the raw cores are rejected
before any state changes: dropped (the state equals the state after the valid replies alone) under
``on_bad_reply="drop"`` and raised (state exactly as before) under ``"raise"``."""

import math

import numpy as np
import pytest

from flwr_strategies.core import Reply, ReplyError
from flwr_strategies.fedli import (
    ArmijoConfig,
    DFWConfig,
    FedExPConfig,
    FedExPServer,
    FedLiLSConfig,
    FedLiLSServer,
    FedLiLUConfig,
    FedLiLUServer,
    ScaffoldConfig,
    ScaffoldServer,
)

NAN, INF = float("nan"), float("inf")

# ------------------------------------------------------------------ impossible hyperparameters
CONFIG_ROWS = [
    ("armijo c = 0", lambda: ArmijoConfig(armijo_c=0.0), "armijo_c"),
    ("armijo c = 1", lambda: ArmijoConfig(armijo_c=1.0), "armijo_c"),
    ("backtrack factor 1.5", lambda: ArmijoConfig(backtrack_factor=1.5), "backtrack_factor"),
    ("eta_max NaN", lambda: ArmijoConfig(eta_max=NAN), "eta_max"),
    ("growth factor < 1", lambda: ArmijoConfig(growth_factor=0.5), "growth_factor"),
    ("unknown growth rule", lambda: ArmijoConfig(growth_rule="fast"), "growth_rule"),
    ("sls batches per epoch 0", lambda: ArmijoConfig(sls_batches_per_epoch=0), "sls_batches_per_epoch"),
    ("reset option 3", lambda: ArmijoConfig(reset_option=3), "reset_option"),
    ("dfw eps = 0", lambda: DFWConfig(dfw_eps=0.0), "dfw_eps"),
    ("dfw eps < 0", lambda: DFWConfig(dfw_eps=-1e-5), "dfw_eps"),
    ("dfw eta <= 0", lambda: DFWConfig(server_eta=0.0), "server_eta"),
    ("dfw momentum 1", lambda: DFWConfig(server_momentum=1.0), "server_momentum"),
    ("dfw lambda inf", lambda: DFWConfig(server_weight_decay=INF), "server_weight_decay"),
    ("fedexp eps < 0", lambda: FedExPConfig(eps=-1e-3), "eps"),
    ("fedexp eps NaN", lambda: FedExPConfig(eps=NAN), "eps"),
    ("fedexp eps decay 0", lambda: FedExPConfig(eps_decay=0.0), "eps_decay"),
    ("fedexp eps decay > 1", lambda: FedExPConfig(eps_decay=1.5), "eps_decay"),
    ("fedexp eps scaling", lambda: FedExPConfig(eps_scaling="S"), "eps_scaling"),
    ("fedexp unknown weighting", lambda: FedExPConfig(weighting="median"), "weighting"),
    ("ls unknown weighting", lambda: FedLiLSConfig(weighting="median"), "weighting"),
    ("ls step_size_sync <= 0", lambda: FedLiLSConfig(step_size_sync=-1.0), "step_size_sync"),
    ("ls step_size_sync name", lambda: FedLiLSConfig(step_size_sync="mean"), "step_size_sync"),
    ("lu loss report", lambda: FedLiLUConfig(loss_report="last"), "loss_report"),
    ("scaffold server_lr = 0", lambda: ScaffoldConfig(server_lr=0.0), "server_lr"),
    ("scaffold server_lr < 0", lambda: ScaffoldConfig(server_lr=-1.0), "server_lr"),
    ("scaffold server_lr inf", lambda: ScaffoldConfig(server_lr=INF), "server_lr"),
    ("scaffold control state", lambda: ScaffoldConfig(control_state="disk"), "control_state"),
    ("scaffold weighting without total", lambda: ScaffoldConfig(weighting="num_examples"), "total_examples"),
    ("scaffold without N", lambda: ScaffoldServer([np.zeros(2)]), "num_partitions"),
    ("core fraction 0", lambda: FedExPServer([np.zeros(2)], fraction_train=0.0), "fraction_train"),
    ("core NaN initial model", lambda: FedLiLSServer([np.array([NAN])]), "NaN"),
]


@pytest.mark.parametrize("name,build,word", CONFIG_ROWS, ids=[r[0] for r in CONFIG_ROWS])
def test_impossible_hyperparameters_fail_at_construction(name, build, word):
    with pytest.raises(ValueError) as err:
        build()
    assert word in str(err.value)


def test_registry_rejects_settings_before_training():
    from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment

    for kw, word in (({"method": "fedli-ls", "weight_decay": 1e-4}, "weight_decay"),
                     ({"method": "fedli-ls", "momentum": 0.9}, "momentum"),
                     ({"method": "fedexp", "params": {"variant": "paper2"}}, "variant"),
                     ({"method": "fedexp", "params": {"eps": -1.0}}, "eps")):
        cfg = ExperimentConfig(num_clients=3, rounds=1, progress=False, **kw)
        with pytest.raises(ValueError, match=word):
            get_experiment(cfg).build_strategy()


# ------------------------------------------------------------------ tampered replies
def _model():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)]


def _good(pid, metrics, scaffold=False):
    rng = np.random.default_rng(10 + pid)
    arrays = [a + 0.1 * rng.standard_normal(a.shape).astype(np.float32) for a in _model()]
    if scaffold:
        arrays = arrays + [np.full_like(a, 0.01) for a in arrays]
    return Reply(pid, arrays, 20 + pid, dict(metrics))


def _edit(reply, *, arrays=None, n=None, metrics=None, pid=None):
    return Reply(reply.partition_id if pid is None else pid, reply.arrays if arrays is None else arrays,
                 reply.num_examples if n is None else n, reply.metrics if metrics is None else metrics)


LS = {"step_size": 0.5, "train_loss": 1.0}
LU = {"train_loss": 1.0}

CORES = {
    "ls": lambda: FedLiLSServer(_model(), num_partitions=4),
    "lu": lambda: FedLiLUServer(_model(), num_partitions=4, config=FedLiLUConfig(dfw=DFWConfig.preset("code"))),
    "exp": lambda: FedExPServer(_model(), num_partitions=4, config=FedExPConfig.code()),
    "scaffold": lambda: ScaffoldServer(_model(), num_partitions=4),
    "scaffold-server": lambda: ScaffoldServer(_model(), num_partitions=4, config=ScaffoldConfig(control_state="server")),
}
METRICS = {"ls": LS, "lu": LU, "exp": {}, "scaffold": {}, "scaffold-server": {}}


def _rows():
    g = lambda core, pid=0: _good(pid, METRICS[core], scaffold=core.startswith("scaffold"))  # noqa: E731
    return [
        # (name, core, bad replies, valid replies the round keeps)
        ("ls array of shape (1,1)", "ls", [_edit(g("ls"), arrays=[np.ones((1, 1), np.float32), g("ls").arrays[1]])], []),
        ("ls one array missing", "ls", [_edit(g("ls"), arrays=g("ls").arrays[:1])], []),
        ("ls missing step_size", "ls", [_edit(g("ls"), metrics={"train_loss": 1.0})], []),
        ("ls step_size = 0", "ls", [_edit(g("ls"), metrics={"step_size": 0.0})], []),
        ("ls step_size NaN", "ls", [_edit(g("ls"), metrics={"step_size": NAN})], [g("ls", 1)]),
        ("ls NaN weights", "ls", [_edit(g("ls"), arrays=[np.full((3, 2), NAN, np.float32), g("ls").arrays[1]])], [g("ls", 1)]),
        ("ls num_examples 0", "ls", [_edit(g("ls"), n=0)], [g("ls", 1)]),
        ("ls negative num_examples", "ls", [_edit(g("ls"), n=-5)], []),
        ("ls partition id -1", "ls", [_edit(g("ls"), pid=-1)], [g("ls", 1)]),
        ("ls partition out of range", "ls", [_edit(g("ls"), pid=9)], []),
        ("ls unsampled partition", "ls", [_edit(g("ls"), pid=3)], [g("ls", 1)]),
        ("ls duplicate partition", "ls", [g("ls", 1)], [g("ls", 1)]),
        ("lu NaN loss", "lu", [_edit(g("lu"), metrics={"train_loss": NAN})], [g("lu", 1)]),
        ("lu inf loss", "lu", [_edit(g("lu"), metrics={"train_loss": INF})], []),
        ("lu missing loss", "lu", [_edit(g("lu"), metrics={})], [g("lu", 1)]),
        ("lu loss not a number", "lu", [_edit(g("lu"), metrics={"train_loss": "low"})], []),
        ("exp integer dtype", "exp", [_edit(g("exp"), arrays=[np.ones((3, 2), np.int64), g("exp").arrays[1]])], [g("exp", 1)]),
        ("exp inf weights", "exp", [_edit(g("exp"), arrays=[g("exp").arrays[0], np.array([INF, 0], np.float32)])], []),
        ("exp extra array", "exp", [_edit(g("exp"), arrays=g("exp").arrays + [np.zeros(2, np.float32)])], [g("exp", 1)]),
        ("scaffold control of wrong shape", "scaffold",
         [_edit(g("scaffold"), arrays=g("scaffold").arrays[:3] + [np.zeros((2, 2), np.float32)])], [g("scaffold", 1)]),
        ("scaffold weights without controls", "scaffold", [_edit(g("scaffold"), arrays=g("scaffold").arrays[:2])], []),
        ("scaffold NaN control", "scaffold",
         [_edit(g("scaffold"), arrays=g("scaffold").arrays[:2] + [np.full((3, 2), NAN, np.float32), g("scaffold").arrays[3]])],
         [g("scaffold", 1)]),
        ("scaffold server-held wrong control shape", "scaffold-server",
         [_edit(g("scaffold-server"), arrays=g("scaffold-server").arrays[:2] + [np.zeros((3, 3), np.float32), np.zeros(2, np.float32)])],
         [g("scaffold-server", 1)]),
    ]


ROWS = _rows()


def _same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


@pytest.mark.parametrize("name,core,bad,good", ROWS, ids=[r[0] for r in ROWS])
def test_tampered_reply_is_rejected_before_any_state_change(name, core, bad, good):
    sampled = [0, 1]
    # raise: nothing changes at all
    strict = CORES[core]()
    strict.configure_train(1, sampled)
    before = strict.state_dict()
    with pytest.raises(ReplyError):
        strict.train_round(1, good + bad, sampled=sampled, on_bad_reply="raise")
    assert _same(strict.state_dict(), before)
    # drop: the round goes on with the valid replies only, and counts the rejection
    dropped, reference = CORES[core](), CORES[core]()
    m = dropped.train_round(1, good + bad, sampled=sampled, on_bad_reply="drop")
    reference.train_round(1, good, sampled=sampled, on_bad_reply="drop")
    assert m["rejected"] == len(bad)
    assert _same(dropped.state_dict()["method"], reference.state_dict()["method"])
    if not good:
        assert _same(dropped.state_dict()["method"], before["method"])


def test_at_least_fifteen_rows():
    assert len(CONFIG_ROWS) + len(ROWS) >= 15
