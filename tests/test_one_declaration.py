"""One declaration per method (issue 25): the strategy class a user imports declares every
hyperparameter's default, range and source (its config dataclasses' fields), and the command line
runs those defaults, except where the method names an override, which ``defaults`` prints.

Walks every registered method and every exported strategy of both APIs.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from flwr_strategies.core.declare import SOURCE_KINDS, declared
from flwr_strategies.registry import MethodSpec, list_methods, load_object
from flwr_strategies.simulations.cli import print_defaults
from flwr_strategies.simulations.settings import RESOLVED, ExperimentConfig

METHODS = sorted(list_methods())


def _exported() -> list[type]:
    out = []
    for module in ("flwr_strategies", "flwr_strategies.serverapp"):
        for name, where in importlib.import_module(module)._EXPORTS.items():
            cls = getattr(importlib.import_module(where), name)
            if inspect.isclass(cls) and getattr(cls, "core_cls", None) is not None:
                out.append(cls)
    return out


STRATEGIES = _exported()


@pytest.mark.parametrize("method", METHODS)
def test_the_command_line_runs_the_class_defaults_or_a_printed_override(method, capsys):
    spec = list_methods()[method]
    assert spec.strategy, f"{method} names no strategy class"
    cfg = ExperimentConfig(method=method).resolve()
    declaration = spec.declaration()
    assert set(cfg.params) == set(declaration), method
    overridden = []
    for key, (default, _, source) in declaration.items():
        if key in spec.overrides:
            overridden.append(key)
            continue
        assert cfg.params[key] == default or (cfg.params[key] != cfg.params[key] and default != default), (
            f"{method} --set {key}: the command line runs {cfg.params[key]!r}, the class declares {default!r}")
        assert cfg.provenance["params"][key] == source, (method, key)
    # a class field the run sets from its own settings (FedMeZO's lr, local_steps...) runs the class's
    # default with the class's source, or the method's named override, printed with * by `defaults`
    configs = list(load_object(spec.strategy).hyperparameters.values())
    own = {k: v for config in configs for k, v in declared(config).items()}
    flags = []
    for key in spec.derived:
        if key not in RESOLVED or key not in own:
            continue
        default, _, source = own[key]
        if key not in spec.train_defaults:
            assert getattr(cfg, key) == default and cfg.provenance[key]["source"] == source, (method, key)
        elif default is not None and getattr(cfg, key) != default:
            flags.append("--" + key.replace("_", "-"))
    print_defaults(method)
    out = capsys.readouterr().out
    for key in overridden + flags:
        line = next(x for x in out.splitlines() if x.strip().startswith(key + " "))
        assert line.split()[1] == "*" and f"* {key}: declared default" in out, (method, key)
    assert method not in ("fedmezo", "lora-fedavg") or flags == ["--lr"], (method, flags)


@pytest.mark.parametrize("method", METHODS)
def test_set_builds_the_users_class(method):
    """``--set k=v`` is ``Class(k=v)``: every class hyperparameter of the method's resolved settings is a
    keyword argument of the class, and the class built with them holds the same values."""
    spec = list_methods()[method]
    cls = load_object(spec.strategy)
    params = inspect.signature(cls).parameters
    cfg = ExperimentConfig(method=method).resolve()
    mine = {k: v for k, v in cfg.params.items() if k in params}
    required = {n: None for n, p in params.items() if p.default is inspect.Parameter.empty}
    strategy = cls(**required, **mine)
    values = strategy.hyperparameter_values()
    for key, value in mine.items():
        assert values[key] == value, (method, key, values[key], value)


#: ``--set`` values that differ from the defaults, per method (the others run with their defaults).
USER_SETS = {"dfedcata": {"beta": "0.5", "lam": "0.1", "neighbours": "7", "allow_disconnected": "true"},
             "dfedavgm": {"topology": "ring"}, "fedli-ls": {"variant": "code", "armijo_c": "0.2"},
             "fedli-lu": {"variant": "code", "server_eta": "0.5"}, "scaffold": {"variant": "code"},
             "fedmud": {"decomp": "mat", "pattern": "ab"}, "fedlmt": {"weighting": "uniform"},
             "fedmezo": {"mu": "0.01", "variant": "code"}, "lora-fedavg": {"weighting": "num_examples"},
             "doadp": {"neighbours": "5", "beta": "0.8"}, "fedadam": {"eta": "0.05"}}


@pytest.mark.parametrize("method", METHODS)
def test_the_command_line_builds_its_core_from_the_class(method, monkeypatch):
    """The command line's server core is the class's ``core_cls`` over the configs ``Class(k=v)``
    holds for the ``--set`` values (and the values the run derives: DFedCata's ``lr`` from ``--lr``):
    the spec builds no config of its own."""
    from flwr_strategies.simulations.experiment import get_experiment

    spec = list_methods()[method]
    cls = load_object(spec.strategy)
    exp = get_experiment(ExperimentConfig(method=method, params=USER_SETS.get(method, {})).resolve())
    setup, params = exp.server_setup(), dict(exp.params)
    calls = []
    monkeypatch.setattr(cls, "core_cls", lambda initial, **kwargs: calls.append(kwargs) or "core")
    assert spec.build_core(setup, params) == "core" and len(calls) == 1
    values = spec.class_arguments(params, setup)
    for key, value in USER_SETS.get(method, {}).items():
        if key != "variant":
            assert key in values or any(key in v for v in values.values() if isinstance(v, dict)), (method, key)
    required = {n: None for n, p in inspect.signature(cls).parameters.items() if p.default is inspect.Parameter.empty}
    strategy = cls(**required, **values)
    assert set(strategy.configs) <= set(calls[0]), method
    for key, config in strategy.configs.items():
        assert calls[0][key] == config, (method, key)


def test_every_declared_field_has_a_range_and_a_source():
    seen = []
    for spec in list_methods().values():
        configs = list(load_object(spec.strategy).hyperparameters.values()) + [
            load_object(c) if isinstance(c, str) else c for c in spec.settings]
        for config in configs:
            for key, (_, rng, source) in declared(config).items():
                seen.append(key)
                assert rng, f"{type(config).__name__ if not isinstance(config, type) else config.__name__}.{key}"
                assert source and source.split(":", 1)[0] in SOURCE_KINDS, (key, source)
    assert len(set(seen)) > 100


def test_fedmud_family_weighting_is_a_project_choice_and_baselines_cite_their_sources():
    cfg = ExperimentConfig(method="fedmud").resolve()
    assert cfg.provenance["params"]["weighting"].startswith("project:")
    assert "number of batches" in cfg.provenance["params"]["weighting"]
    for method in ("fedexp", "scaffold", "fedlmt", "dfedsam", "fedsam", "dpdo", "cpgt"):
        for source in ExperimentConfig(method=method).resolve().provenance["params"].values():
            if source.startswith("paper:") and any(p in source for p in ("App. C", "Sec. 7", "App. A-A")):
                assert "host paper" in source or "FedLi" in source or "DFedCata" in source, (method, source)


@pytest.mark.parametrize("cls", STRATEGIES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_signature_names_every_hyperparameter_with_its_default(cls):
    sig = inspect.signature(cls)
    kinds = {p.kind for p in sig.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds
    for config in cls.hyperparameters.values():
        for field in dataclasses.fields(config):
            assert field.name in sig.parameters, (cls, field.name)
            default = getattr(config, field.name) if not isinstance(config, type) else (
                field.default if field.default is not dataclasses.MISSING else field.default_factory())
            assert sig.parameters[field.name].default == default, (cls, field.name)


def test_help_shows_each_hyperparameter_with_its_source():
    import flwr_strategies

    text = inspect.getdoc(flwr_strategies.DFedCata)
    for key, (default, _, source) in declared(flwr_strategies.DFedCata.hyperparameters["config"]).items():
        assert f"{key} = {default!r} (" in text and f"Source: {source}" in text, key


def test_a_spec_names_its_class_and_holds_no_defaults_of_its_own():
    names = {f.name for f in dataclasses.fields(MethodSpec)}
    assert "defaults" not in names and "strategy" in names
    assert not any("param_provenance" in spec.extra or "param_defaults" in spec.extra
                   for spec in list_methods().values())
