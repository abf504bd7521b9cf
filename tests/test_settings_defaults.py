"""Paper defaults by method (issue 14): a setting the caller leaves unset takes the method's
``train_defaults``, then the project's; the caller's value always wins; every resolved value's
source is recorded (results.json, ``defaults``/``--help``, the Flower run config).

The mechanism is tested with a fake registered method, so it does not depend on any method's
actual numbers; the last tests check every registered method's defaults are well formed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from flwr_strategies import registry
from flwr_strategies.core.declare import setting
from flwr_strategies.registry import MethodSpec
from flwr_strategies.setup import SettingError
from flwr_strategies.simulations import cli
from flwr_strategies.simulations.experiment import Experiment
from flwr_strategies.simulations.results import final_text, summarize
from flwr_strategies.simulations.runner import run_experiment
from flwr_strategies.simulations.settings import (
    DEFAULT_SOURCES,
    METHOD_SETTABLE,
    PROJECT_DEFAULTS,
    PROJECT_SOURCES,
    RESOLVED,
    ExperimentConfig,
    check_train_defaults,
    config_from_run_config,
    source_kind,
)

PAPER = {
    "lr": (0.05, "paper: Table 9"),
    "local_steps": (3, "official code: train.py"),
    "batch_size": ({"digits": 16, "*": 64}, "paper: Sec. 4"),
    "grad_clip": (10.0, "official code: client.py"),
    "momentum": (0.5, "project: a value for this test"),
    "num_clients": (4, "paper: Sec. 4"),
    "rounds": (2, "paper: Sec. 4"),
}


@dataclasses.dataclass(frozen=True)
class _FakeConfig:
    server_lr: float = setting(1.0, "> 0", "paper: Eq. 2", "Server learning rate.")


def _fake(name: str, train_defaults: dict, **kw) -> MethodSpec:
    return MethodSpec(name=name, summary="a fake method with paper defaults", paper="Nobody et al., 2024",
                      settings=(_FakeConfig,), strategy="flwr_strategies.baselines.strategy:FedAvg",
                      client="flwr_strategies.clients.base:TorchClient", train_defaults=train_defaults, **kw)


@pytest.fixture
def fake_method():
    registry.list_methods()
    specs = [registry.register_method(_fake("fake-paper", PAPER))]
    yield specs[0]
    for spec in specs:
        registry._REGISTRY.pop(spec.name, None)


def test_unset_settings_take_the_method_defaults_with_provenance(fake_method):
    cfg = ExperimentConfig(method="fake-paper").resolve()
    assert (cfg.lr, cfg.local_steps, cfg.local_epochs, cfg.batch_size, cfg.grad_clip, cfg.momentum) == (0.05, 3, None, 16, 10.0, 0.5)
    assert (cfg.num_clients, cfg.rounds) == (4, 2)
    src = cfg.sources()
    assert src["lr"] == "paper: Table 9" and src["local_steps"] == "official code: train.py"
    assert src["momentum"] == "project: a value for this test"
    assert src["local_epochs"] == "official code: train.py"  # the budget is one choice: steps, so no epochs
    assert src["weight_decay"] == PROJECT_SOURCES["weight_decay"] and cfg.weight_decay == PROJECT_DEFAULTS["weight_decay"]
    assert src["params"] == {"server_lr": "paper: Eq. 2"}
    assert set(src) == set(RESOLVED) | {"params"}


def test_user_values_win_and_are_labelled_user(fake_method):
    cfg = ExperimentConfig(method="fake-paper", lr=0.2, local_epochs=2, grad_clip="none", params={"server_lr": "0.5"}).resolve()
    assert (cfg.lr, cfg.local_epochs, cfg.local_steps, cfg.grad_clip, cfg.params["server_lr"]) == (0.2, 2, None, None, 0.5)
    src = cfg.sources()
    assert src["lr"] == src["local_epochs"] == src["local_steps"] == src["grad_clip"] == "user"
    assert src["params"]["server_lr"] == "user"
    assert cfg.batch_size == 16 and src["batch_size"] == "paper: Sec. 4"


def test_dataset_dependent_default_and_project_fallback(fake_method):
    assert ExperimentConfig(method="fake-paper", dataset="synthetic").resolve().batch_size == 64
    spec = _fake("fake-cifar-only", {"lr": ({"cifar10": 0.3}, "paper: Table 1")})
    cfg = ExperimentConfig(method="fake-cifar-only")
    registry.register_method(spec)
    try:
        assert cfg.resolve().lr == PROJECT_DEFAULTS["lr"] and cfg.resolve().sources()["lr"] == PROJECT_SOURCES["lr"]
        assert dataclasses.replace(cfg, dataset="cifar10").resolve().lr == 0.3
    finally:
        registry._REGISTRY.pop(spec.name)


def test_resolve_is_idempotent_and_follows_later_changes(fake_method):
    cfg = ExperimentConfig(method="fake-paper", grad_clip="none", lr=0.2).resolve()
    assert cfg.resolve() == cfg
    assert ExperimentConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))).resolve() == cfg
    changed = dataclasses.replace(cfg, momentum=0.9).resolve()
    assert changed.momentum == 0.9 and changed.sources()["momentum"] == "user"
    other = dataclasses.replace(cfg, method="fedavg", params={}).resolve()  # the fake's defaults go, the user's stay
    assert other.momentum == PROJECT_DEFAULTS["momentum"] and other.local_steps is None and other.local_epochs == 1
    assert other.lr == 0.2 and other.grad_clip is None and other.sources()["grad_clip"] == "user"
    assert cfg.key() == ExperimentConfig(method="fake-paper", grad_clip="none", lr=0.2).key()


def test_defaults_reach_training_exactly_like_user_values(fake_method, tmp_path):
    exp = Experiment(ExperimentConfig(method="fake-paper"))
    assert exp.train.lr == 0.05 and exp.train.local_steps == 3 and exp.train.grad_clip == 10.0 and exp.train.momentum == 0.5
    assert exp.fit_config(1)["lr"] == 0.05 and exp.fit_config(1)["local_steps"] == 3
    by_default = run_experiment(ExperimentConfig(method="fake-paper", progress=False, out=str(tmp_path)))
    explicit = run_experiment(ExperimentConfig(method="fake-paper", progress=False, lr=0.05, local_steps=3, batch_size=16,
                                               grad_clip=10.0, momentum=0.5, num_clients=4, rounds=2))
    other = run_experiment(ExperimentConfig(method="fake-paper", progress=False, lr=0.01))
    acc = lambda r: [x["loss"] for x in r["rounds"]]  # noqa: E731
    assert acc(by_default) == acc(explicit)
    assert acc(other) != acc(by_default)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["provenance"]["lr"] == "paper: Table 9" and saved["config"]["lr"] == 0.05
    assert saved["provenance"]["local_steps"] == "official code: train.py"
    assert saved["provenance"]["rounds"] == "paper: Sec. 4"
    assert explicit["provenance"]["lr"] == "user"


def test_cli_shows_values_and_sources(fake_method, capsys):
    assert cli.main(["defaults", "fake-paper"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("--lr "))
    assert "0.05" in line and "paper" in line
    line = next(x for x in out.splitlines() if x.strip().startswith("--grad-clip"))
    assert "10" in line and "official code" in line
    assert "server_lr" in out
    assert cli.main(["list", "--method", "fake-paper"]) == 0
    assert capsys.readouterr().out == out
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "--method", "fake-paper", "--help"])
    assert stop.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "[fake-paper: 0.05, paper: Table 9]" in help_text and "[fake-paper: 3, official code: train.py]" in help_text


def test_cli_flags_override_defaults_for_every_train_setting(fake_method):
    args = cli.build_parser("fake-paper").parse_args([
        "run", "--method", "fake-paper", "--lr", "0.3", "--lr-decay", "0.9", "--local-epochs", "2", "--batch-size", "8",
        "--weight-decay", "1e-4", "--momentum", "0", "--grad-clip", "none", "--local-steps", "none"])
    cfg = ExperimentConfig.from_dict({"method": "fake-paper", **cli._overrides(args)}).resolve()
    t = cfg.train_config()
    assert (t.lr, t.lr_decay, t.local_epochs, t.local_steps, t.batch_size, t.weight_decay, t.momentum, t.grad_clip) == (
        0.3, 0.9, 2, None, 8, 1e-4, 0.0, None)
    assert all(cfg.sources()[k] == "user" for k in ("lr", "lr_decay", "local_epochs", "batch_size", "weight_decay", "momentum", "grad_clip"))
    assert {f.name for f in dataclasses.fields(type(t))} <= set(vars(args))  # a flag for every TrainConfig field


def test_run_config_leaves_empty_keys_to_the_method(fake_method):
    cfg = config_from_run_config({"method": "fake-paper", "lr": "", "batch-size": "", "num-server-rounds": 3,
                                  "set": "server_lr=0.7", "out-dir": ""})
    assert (cfg.lr, cfg.batch_size, cfg.rounds, cfg.params["server_lr"]) == (0.05, 16, 3, 0.7)
    src = cfg.sources()
    assert src["lr"] == "paper: Table 9" and src["rounds"] == "run config" and src["params"]["server_lr"] == "run config"


def test_invalid_method_defaults_are_reported_as_the_methods(fake_method, capsys):
    bad = registry.register_method(_fake("fake-bad-key", {"learning_rate": (0.1, "paper")}))
    worse = registry.register_method(_fake("fake-bad-value", {"lr": (-1.0, "paper")}))
    try:
        with pytest.raises(ValueError, match="fake-bad-key.*learning_rate"):
            ExperimentConfig(method="fake-bad-key").resolve()
        with pytest.raises(SettingError):
            ExperimentConfig(method="fake-bad-value").validate()
        assert cli.main(["run", "--method", "fake-bad-value", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "--lr defaults to -1.0 (paper default of fake-bad-value)" in err
        assert cli.main(["run", "--method", "fake-bad-value", "--lr", "0.1", "--quiet", "--rounds", "1", "--num-clients", "2"]) == 0
    finally:
        registry._REGISTRY.pop(bad.name)
        registry._REGISTRY.pop(worse.name)


def test_final_accuracy_is_the_last_evaluated_round_and_says_so():
    rounds = [{"round": r, "accuracy": 0.1 * r if r in (0, 10) else None, "loss": 1.0 / (r + 1) if r in (0, 10) else None,
               "bytes_up": 1, "bytes_down": 1, "clients": 2, "failures": 0} for r in range(13)]
    s = summarize(rounds)
    assert s["final_accuracy"] == pytest.approx(1.0) and s["final_accuracy_round"] == 10 and s["last_round"] == 12
    assert s["final_loss_round"] == 10
    assert "last evaluated round 10 of 12" in final_text(s)
    only_initial = summarize(rounds[:3])
    assert only_initial["final_accuracy_round"] == 0 and "round 0 of 2" in final_text(only_initial)


def test_every_registered_method_has_well_formed_defaults():
    for name, spec in registry.list_methods().items():
        check_train_defaults(spec)
        assert set(spec.train_defaults) <= METHOD_SETTABLE, name
        assert all(source_kind(source) in DEFAULT_SOURCES for _, source in spec.train_defaults.values()), name
        cfg = ExperimentConfig(method=name).validate()
        for key, (value, source) in spec.train_defaults.items():
            if not isinstance(value, dict) and key not in ("local_epochs", "local_steps"):
                assert getattr(cfg, key) == value and cfg.sources()[key] == source, (name, key)
