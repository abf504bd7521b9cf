"""The settings of one run (:class:`ExperimentConfig`), where each value comes from, and the checks
that run before anything is built.

Every setting a method may have an opinion on starts *unset* (``None``).
:meth:`ExperimentConfig.resolve` fills each unset one from, in order:

1. the value the caller gave (``source`` ``"user"``, or ``"preset"`` / ``"run config"`` when a
   preset or a Flower run config gave it);
2. the method's own defaults, ``MethodSpec.train_defaults`` (the paper's settings; ``source`` is
   the provenance the method states, a kind and where it comes from: ``"paper: Sec. 5.1"``,
   ``"official code: run/*.sh"`` or ``"project: <the one-line reason>"``), or for a setting the
   strategy class declares (FedMeZO's ``lr``, ``local_steps``...: ``MethodSpec.declared_training``)
   the class's default and source; a ``train_defaults`` value there is a named override of the
   class's, printed with ``*`` by ``defaults``;
3. the project's defaults, :data:`PROJECT_DEFAULTS` (``source`` ``"project: <reason>"``, from
   :data:`PROJECT_SOURCES`).

The resolved config keeps, in ``provenance``, the value and source of every setting (and of every
method hyperparameter under ``provenance["params"]``); ``results.json`` and
``python -m simulations defaults METHOD`` show them.

Three rules make the defaults behave as a user expects:

- ``local_epochs`` and ``local_steps`` are one choice (the local work budget): if the caller sets
  either, the method's defaults for both are ignored.
- A method default may depend on the dataset: ``train_defaults["lr"] = ({"cifar10": 0.1, "*": 0.05},
  "paper: Table 2")`` picks by the resolved dataset (``"*"`` for any other; without a match the
  project's default applies).
- A method hyperparameter's default is the strategy class's declared default, unless the method
  names an override (``MethodSpec.overrides``, printed with its reason by ``defaults``); an
  override may depend on another resolved value (see :meth:`ExperimentConfig.resolve`): DO-ADP's privacy
  settings follow the model (the paper's logistic-regression row or its CNN row), FedMUD's
  initialisation scale follows the decomposition.

An optional setting can be switched off explicitly with the string ``"none"`` (``--grad-clip none``
turns off a method's default clipping). :meth:`ExperimentConfig.validate` checks every resolved
value and raises :class:`~flwr_strategies.setup.SettingError` naming the setting and the value;
front ends name it their own way (:func:`flag_name`, :func:`run_config_key`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from flwr_strategies.core.validation import check_integer, check_number
from flwr_strategies.registry import PROVENANCES, MethodSpec, get_method, parse_value
from flwr_strategies.setup import AUTO_LR, SettingError, TrainConfig

BACKENDS = ("inprocess", "ray")

#: The project's default of every resolved setting and why it is what it is (the setting's ``source`` then).
_PROJECT: dict[str, tuple[Any, str]] = {
    "dataset": ("digits",
                "project: scikit-learn's digits ship with the install, so the default run needs no download"),
    "num_clients": (10, "project: 10 clients keep about 140 digits examples each"),
    "rounds": (20, "project: a run of under a minute on 2 CPUs"),
    "seed": (0, "project: any fixed seed; the same seed gives the same numbers"),
    # None: auto, "natural" for datasets with client groups (synthetic), else "iid"
    "partition": (None, "project: IID unless the dataset has natural client groups"),
    "alpha": (0.5, "project: a moderate Dirichlet skew, used only with --partition dirichlet*"),
    "classes_per_client": (2, "project: used only with --partition label-count"),
    "fraction_fit": (1.0, "project: every client every round, as Flower's FedAvg (fraction_fit=1.0)"),
    "lr": (0.1, "project: plain SGD at 0.1 learns the default models within a few rounds"),
    "local_epochs": (1, "project: one pass over the local data, as Flower's examples"),
    "local_steps": (None, "project: the local budget is local_epochs"),
    "batch_size": (32, "project: 32, as Flower's examples"),
    "weight_decay": (0.0, "project: no regulariser unless a method asks for one"),
    "momentum": (0.0, "project: plain SGD unless a method asks for momentum"),
    "lr_decay": (1.0, "project: a constant learning rate unless a method decays it"),
    "grad_clip": (None, "project: no clipping unless a method clips"),
    "model": (None, "project: the dataset's default model (simulations.models.default_model)"),
    "synthetic_alpha": (1.0, "project: Synthetic(1, 1) of Li et al. (FedProx), used only with --dataset synthetic"),
    "synthetic_beta": (1.0, "project: Synthetic(1, 1) of Li et al. (FedProx), used only with --dataset synthetic"),
}
#: The project's defaults of every resolved setting (used where neither the caller nor the method sets one).
PROJECT_DEFAULTS: dict[str, Any] = {name: value for name, (value, _) in _PROJECT.items()}
#: Why each project default is what it is (the ``source`` of a setting no method defaults).
PROJECT_SOURCES: dict[str, str] = {name: source for name, (_, source) in _PROJECT.items()}
RESOLVED: tuple[str, ...] = tuple(PROJECT_DEFAULTS)
#: Settings a method's ``train_defaults`` may set (the seed is the user's alone).
METHOD_SETTABLE: frozenset[str] = frozenset(RESOLVED) - {"seed"}
#: Settings where None is a meaningful resolved value (set explicitly with "none").
OPTIONAL: frozenset[str] = frozenset({"partition", "local_epochs", "local_steps", "grad_clip", "model"})
NONE_WORDS = ("none", "off")
#: Kinds of provenance a default can have (``MethodSpec.train_defaults``, the config fields' sources and
#: the project's own). A source is ``"KIND: where"``: the paper's section, table or equation; the
#: official code's file; or the project's one-line reason.
DEFAULT_SOURCES = ("paper", "official code", "project")
#: Shown for a method hyperparameter whose registration states no source (a test keeps it unused).
UNSTATED = "unstated"
#: Provenances of values a caller gave.
GIVEN_SOURCES = ("user", "preset", "run config")
#: What ``None`` means in a resolved setting, for display.
NONE_MEANS = {
    "partition": "auto (natural for synthetic, else iid)",
    "local_epochs": "- (local_steps set)",
    "local_steps": "- (local_epochs set)",
    "grad_clip": "none (no clipping)",
    "model": "the dataset's default",
}

INT_SETTINGS = frozenset({"num_clients", "rounds", "seed", "data_seed", "classes_per_client", "local_epochs",
                          "local_steps", "batch_size", "client_threads", "client_seed"})
FLOAT_SETTINGS = frozenset({"alpha", "fraction_fit", "lr", "weight_decay", "momentum", "lr_decay", "grad_clip",
                            "synthetic_alpha", "synthetic_beta", "client_cpus", "client_gpus", "client_timeout",
                            "synthetic_mean_samples"})

#: Flower run-config keys that differ from ``field.replace("_", "-")``.
_RUN_CONFIG_NAMES = {"rounds": "num-server-rounds", "params": "set", "out": "out-dir"}
#: Settings a Flower run config may carry (the others are the runner's execution settings).
RUN_CONFIG_SETTINGS: tuple[str, ...] = ("method",) + RESOLVED + ("data_dir", "data_seed", "device", "params", "fail")


def source_kind(source: Any) -> str:
    """The kind of a provenance label: ``"paper: Table 2"`` -> ``"paper"``, ``"user"`` -> ``"user"``."""
    return str(source).split(":", 1)[0].strip()


#: Run-config keys that would hand the clients a seed the server knows; a run config is the server's, so
#: they are refused (a SuperNode's own ``--node-config "doadp-client-seed=..."`` is the deployment route).
SEED_RUN_CONFIG_KEYS = ("client-seed", "client_seed", "doadp-client-seed")
#: Environment variable through which the project's ``--backend ray`` gives its simulated SuperNodes their
#: node-side settings (``--client-seed``, consent to private-model evaluation): Flower's simulation runtime
#: gives a node no node config beyond its partition, and a server cannot set a SuperNode's environment.
SIMULATED_NODES_ENV = "FLWR_STRATEGIES_SIMULATED_NODES"


def seed_in_run_config_error(key: str, value: Any) -> SettingError:
    """The error for a client seed found in a run config."""
    return SettingError(
        f"run config '{key}'", value,
        "absent: the server sets the run config, so a client seed there would let it regenerate the "
        "clients' DP noise. Give each SuperNode its own secret seed of at least 128 bits with --node-config "
        "\"doadp-client-seed='<32 hex digits>'\" (or in its context.state); --client-seed is for the project's "
        "simulation backends only")


def experiment_budget(params: dict[str, Any], rounds: int) -> dict[str, Any] | None:
    """The privacy budget the experimenter gives the simulated nodes of a DO-ADP-family experiment
    (resolved ``params`` and its ``rounds``): its epsilon, delta (where the method has one) and clip
    over its rounds; None for a method without an epsilon."""
    if "epsilon" not in params:
        return None
    budget = {"epsilon": float(params["epsilon"]), "rounds": int(rounds)}
    budget.update({k: float(params[k]) for k in ("delta", "clip") if params.get(k) is not None})
    return budget


def simulated_nodes_env(cfg: "ExperimentConfig") -> dict[str, str]:
    """:data:`SIMULATED_NODES_ENV` for ``cfg``'s (resolved) simulated SuperNodes under ``--backend ray``:
    the ``--client-seed`` they derive their seeds from, whether they consent to private-model
    evaluation (the experiment's ``evaluate_private``) and their privacy budget
    (:func:`experiment_budget`)."""
    cfg = cfg.validate()
    raw = cfg.params.get("evaluate_private", False)
    allow = bool(parse_value(False, raw)) if isinstance(raw, str) else bool(raw)
    return {SIMULATED_NODES_ENV: json.dumps({"client_seed": cfg.client_seed, "allow_private_eval": allow,
                                             "budget": experiment_budget(cfg.params, cfg.rounds)})}


def simulated_node_config(client_seed: int | None, allow_private_eval: bool, partition_id: int,
                          budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """The node config the project's own simulations give their SuperNode ``partition_id`` (the
    experimenter runs every simulated node): ``doadp-client-seed``, an integer derived from
    ``--client-seed`` and the partition id, when ``client_seed`` is set (a simulation's seed: the
    experimenter holds ``--client-seed``, so it is given to the node's ``context.state`` with
    :func:`~flwr_strategies.clients.doadp.set_client_seed`, not checked as a deployment's node-config
    seed of at least 128 bits);
    ``doadp-allow-private-eval`` when the experiment asks for private-model evaluation
    (``evaluate_private``); the budget keys (``doadp-epsilon``, ``doadp-rounds``, ...) of ``budget``
    (:func:`experiment_budget`)."""
    import numpy as np

    from flwr_strategies.clients.doadp import BUDGET_KEYS, PRIVATE_EVAL_KEY, SEED_KEY

    out: dict[str, Any] = {}
    if client_seed is not None:
        out[SEED_KEY] = int(np.random.SeedSequence([int(client_seed), int(partition_id), 0xC5EED])
                            .generate_state(1, np.uint32)[0])
    if allow_private_eval:
        out[PRIVATE_EVAL_KEY] = True
    out.update({BUDGET_KEYS[field]: value for field, value in (budget or {}).items()})
    return out


def flag_name(setting: str) -> str:
    """The CLI flag of ``setting`` (``weight_decay`` -> ``--weight-decay``; ``params.mu`` -> ``--set``)."""
    return "--set" if setting.startswith("params.") else "--" + setting.replace("_", "-")


def run_config_key(setting: str) -> str:
    """The Flower run-config key of ``setting`` (``rounds`` -> ``num-server-rounds``)."""
    return "set" if setting.startswith("params.") else _RUN_CONFIG_NAMES.get(setting, setting.replace("_", "-"))


@dataclass
class ExperimentConfig:
    """Settings of one run. CLI flags (``--weight-decay``) and Flower run-config keys
    (``weight-decay``) map one to one onto these fields.

    Every field from ``dataset`` to ``synthetic_beta`` defaults to ``None``, *unset*: the method's
    paper defaults apply, then the project's (:data:`PROJECT_DEFAULTS`). :meth:`resolve` returns the
    config with every value filled in and its provenance recorded; the runner resolves before it
    builds anything, so you only call it to inspect what a run will use.

    ``params`` holds the method's hyperparameters (``--set key=value``); ``fail`` lists injected
    client failures as ``"ROUND:PARTITION"`` (``"*:PARTITION"`` for every round) to exercise
    failure paths. ``provenance`` is filled by :meth:`resolve`; a caller may pre-label values it
    sets, e.g. ``{"lr": "preset"}``.
    """

    method: str = "fedavg"
    dataset: str | None = None
    data_dir: str | None = None
    num_clients: int | None = None
    rounds: int | None = None
    seed: int | None = None
    data_seed: int | None = None
    partition: str | None = None
    alpha: float | None = None
    classes_per_client: int | None = None
    fraction_fit: float | None = None
    lr: float | None = None
    local_epochs: int | str | None = None
    local_steps: int | str | None = None
    batch_size: int | None = None
    weight_decay: float | None = None
    momentum: float | None = None
    lr_decay: float | None = None
    grad_clip: float | str | None = None
    model: str | None = None
    synthetic_alpha: float | None = None
    synthetic_beta: float | None = None
    backend: str = "inprocess"
    device: str = "cpu"
    client_cpus: float = 1.0
    client_gpus: float = 0.0
    client_threads: int = 1
    client_seed: int | None = None
    client_timeout: float | str | None = "auto"
    synthetic_mean_samples: float = 4.0
    download: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    fail: list[str] = field(default_factory=list)
    out: str | None = None
    overwrite: bool = False
    progress: bool = True
    provenance: dict[str, Any] = field(default_factory=dict)

    # -- resolution ------------------------------------------------------------------------
    @property
    def spec(self) -> MethodSpec:
        return get_method(self.method)

    def resolve(self) -> "ExperimentConfig":
        """This config with every unset setting filled (caller > method default > project default)
        and ``provenance`` recording each value's source. Idempotent; the original is unchanged.

        Method hyperparameters (``params``) start at ``MethodSpec.defaults`` (the strategy class's
        declared defaults and the method's named overrides); an override ``{key: (driver,
        {driver_value: (value, source), "*": (value, source)})}`` replaces a default the caller did
        not set by the value for the resolved ``driver``: a setting (``"model"``, ``"dataset"``) or
        another hyperparameter (``"params.decomp"``); ``"*"`` matches any other value."""
        spec = get_method(self.method)
        check_train_defaults(spec)
        given = self._given()
        chosen: dict[str, tuple[Any, str]] = {}

        def default(name: str) -> tuple[Any, str] | None:
            if name in spec.train_defaults:
                value, source = spec.train_defaults[name]
                if isinstance(value, Mapping):  # per-dataset default, optionally with its own source
                    dataset = chosen["dataset"][0]
                    key = dataset if dataset in value else "*" if "*" in value else None
                    if key is None:
                        return None
                    entry = value[key]
                    if isinstance(entry, tuple) and len(entry) == 2 and source_kind(entry[1]) in PROVENANCES:
                        return entry
                    return entry, source
                return value, source
            return training.get(name)

        training = spec.declared_training()
        for name in RESOLVED:
            if name in ("local_epochs", "local_steps"):
                continue
            chosen[name] = given.get(name) or default(name) or (PROJECT_DEFAULTS[name], PROJECT_SOURCES[name])
        chosen.update(_budget(given, default))
        params, param_sources = self._resolved_params(spec, chosen)
        provenance = {name: {"value": value, "source": source} for name, (value, source) in chosen.items()}
        provenance["params"] = param_sources
        return replace(self, **{name: value for name, (value, _) in chosen.items()}, params=params,
                       fail=list(self.fail), provenance=provenance)

    def _given(self) -> dict[str, tuple[Any, str]]:
        """The settings the caller gave, with their sources (values an earlier resolve filled in
        from defaults, and not changed since, count as unset)."""
        out: dict[str, tuple[Any, str]] = {}
        for name in RESOLVED:
            value = getattr(self, name)
            record = self.provenance.get(name)
            if isinstance(record, str):
                record = {"source": record}
            record = record if isinstance(record, Mapping) else {}
            source = record.get("source")
            label = source if source in GIVEN_SOURCES else "user"
            if value is None:
                if source in GIVEN_SOURCES and "value" in record and record["value"] is None:
                    out[name] = (None, label)  # an explicit "none" kept through a resolve
                continue
            if isinstance(value, str) and name in OPTIONAL and value.strip().lower() in NONE_WORDS:
                out[name] = (None, label)
                continue
            if source_kind(source) in DEFAULT_SOURCES and "value" in record and _same(record["value"], value):
                continue  # filled by an earlier resolve from a default
            out[name] = (value, label)
        return out

    def _resolved_params(self, spec: MethodSpec,
                         chosen: Mapping[str, tuple[Any, str]]) -> tuple[dict[str, Any], dict[str, str]]:
        """The method's hyperparameters (defaults, then dependent defaults, updated by ``params``),
        each parsed to its default's type, with sources; unknown keys and unparsable values raise
        naming them."""
        given_sources = self.provenance.get("params") if isinstance(self.provenance.get("params"), Mapping) else {}
        dependent = {k: v for k, v in spec.overrides.items() if isinstance(v[1], Mapping)}
        params = spec.defaults
        defaults = dict(params)
        sources = {key: source or UNSTATED for key, source in spec.sources.items()}
        given: set[str] = set()
        for key, value in (self.params or {}).items():
            if key not in params:
                valid = ", ".join(sorted(params)) or "(none)"
                raise KeyError(f"method '{spec.name}' has no parameter '{key}' (--set {key}=...); its parameters: {valid}")
            if isinstance(value, str):
                try:
                    value = parse_value(params[key], value)
                except ValueError:
                    kind = type(params[key]).__name__ if params[key] is not None else "value"
                    raise SettingError(f"params.{key}", value, f"a {kind} (method '{spec.name}')") from None
            source = given_sources.get(key)
            if source_kind(source) in DEFAULT_SOURCES + (UNSTATED,) and _is_default(defaults, dependent, key, value):
                continue  # a default carried over from an earlier resolve
            params[key] = value
            sources[key] = source if source in GIVEN_SOURCES else "user"
            given.add(key)
        for key, (driver, table) in dependent.items():
            if key in given:
                continue
            current = params[driver[len("params."):]] if driver.startswith("params.") else chosen[driver][0]
            entry = table.get(current, table.get("*"))
            if entry is not None:
                params[key], sources[key] = entry
        return params, sources

    # -- checks ----------------------------------------------------------------------------
    def validate(self) -> "ExperimentConfig":
        """Check every setting (resolved first) without building anything; return the resolved
        config. Raises :class:`~flwr_strategies.setup.SettingError` (a ``ValueError``) naming the
        setting and the value, or ``KeyError`` for unknown names."""
        cfg = self.resolve()
        try:
            _check(cfg)
        except SettingError as err:
            record = cfg.provenance.get(err.name)
            err.source = record.get("source") if isinstance(record, Mapping) else None
            err.method = cfg.method
            raise
        return cfg

    def train_config(self) -> TrainConfig:
        """The local-training settings (resolved): this config's values of :class:`TrainConfig`'s fields."""
        cfg = self if self.provenance else self.resolve()
        return TrainConfig(**{f.name: getattr(cfg, f.name) for f in fields(TrainConfig)})

    def failures(self) -> set[tuple[int | None, int]]:
        """The injected failures as ``(round or None for every round, partition)``."""
        return parse_failures(self.fail)

    # -- identity and (de)serialisation ----------------------------------------------------
    def key(self) -> str:
        """Identity of what gets built (resolved; output, provenance and execution settings excluded)."""
        d = asdict(self.resolve())
        for k in ("out", "overwrite", "progress", "backend", "client_cpus", "client_gpus", "client_timeout", "download",
                  "provenance"):
            d.pop(k)
        return json.dumps(d, sort_keys=True, default=str)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExperimentConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise KeyError(f"unknown experiment settings: {', '.join(sorted(unknown))}; valid: {', '.join(sorted(names))}")
        return cls(**dict(d))

    def sources(self) -> dict[str, Any]:
        """``{setting: source}`` of a resolved config (``params`` nested), for results and help."""
        cfg = self if self.provenance else self.resolve()
        out: dict[str, Any] = {}
        for name in RESOLVED:
            record = cfg.provenance.get(name, {})
            out[name] = record.get("source", "user") if isinstance(record, Mapping) else str(record)
        out["params"] = dict(cfg.provenance.get("params", {}))
        return out


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b) or (
            isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
            and not isinstance(b, bool) and float(a) == float(b))
    except (TypeError, ValueError):
        return False


def _is_default(defaults: Mapping[str, Any], dependent: Mapping[str, Any], key: str, value: Any) -> bool:
    """Whether ``value`` is a default of hyperparameter ``key`` (its own or a dependent one)."""
    return _same(defaults.get(key), value) or key in dependent and any(
        _same(entry[0], value) for entry in dependent[key][1].values())


def _budget(given: dict, default) -> dict[str, tuple[Any, str]]:
    """``local_epochs`` / ``local_steps``: one choice, from the caller, else the method, else the project."""
    names = ("local_epochs", "local_steps")
    if any(n in given for n in names):
        source = next(given[n][1] for n in names if n in given)
        return {n: given.get(n, (None, source)) for n in names}
    method = {n: default(n) for n in names}
    if any(m is not None and m[0] is not None for m in method.values()):
        source = next(m[1] for m in method.values() if m is not None)
        return {n: method[n] if method[n] is not None else (None, source) for n in names}
    return {n: (PROJECT_DEFAULTS[n], PROJECT_SOURCES[n]) for n in names}


def check_train_defaults(spec: MethodSpec) -> None:
    """Raise ``ValueError`` if ``spec.train_defaults`` names a setting a method cannot default."""
    for key in spec.train_defaults:
        if key not in METHOD_SETTABLE:
            raise ValueError(
                f"method '{spec.name}': train_defaults names '{key}', which is not a setting a method can "
                f"default; valid: {', '.join(sorted(METHOD_SETTABLE))}"
            )


def parse_failures(specs: list[str]) -> set[tuple[int | None, int]]:
    """``["2:3", "*:1"]`` -> ``{(2, 3), (None, 1)}``; a malformed entry raises naming it."""
    out: set[tuple[int | None, int]] = set()
    for s in specs or []:
        try:
            r, p = str(s).split(":")
            out.add((None if r.strip() == "*" else int(r), int(p)))
        except ValueError:
            raise SettingError("fail", s, "ROUND:PARTITION or *:PARTITION (bad failure spec)") from None
    return out


# -- the checks of a resolved config -------------------------------------------------------------
def _check(cfg: ExperimentConfig) -> None:
    from .datasets import FILE_DATASETS, HF_PARTITIONERS, HF_PREFIX
    from .tasks import task_choices

    spec = get_method(cfg.method)
    choices = task_choices(spec.task)
    hf = str(cfg.dataset).startswith(HF_PREFIX)
    if choices.get("datasets") and cfg.dataset not in choices["datasets"] and not (hf and spec.task == "classification"):
        also = f", or {HF_PREFIX}NAME (Flower Datasets)" if spec.task == "classification" else ""
        raise SettingError("dataset", cfg.dataset, f"one of {', '.join(choices['datasets'])}{also} "
                                                   f"(method '{spec.name}' runs the task '{spec.task}')")
    if hf and cfg.partition is not None and cfg.partition not in HF_PARTITIONERS:
        raise SettingError("partition", cfg.partition, f"one of {', '.join(HF_PARTITIONERS)} for a Flower Datasets "
                                                       "(hf:) dataset: Flower's partitioners")
    if cfg.download and cfg.dataset not in FILE_DATASETS:
        raise SettingError("download", True, f"used only with {', '.join(FILE_DATASETS)} (torchvision fetches those), "
                                             f"not with --dataset {cfg.dataset}")
    if cfg.download and cfg.data_dir is None:
        raise SettingError("data_dir", None, "the folder --download fetches the files into")
    check_integer("num_clients", cfg.num_clients, 1)
    check_integer("rounds", cfg.rounds, 1)
    check_integer("seed", cfg.seed, 0)
    if cfg.data_seed is not None:
        check_integer("data_seed", cfg.data_seed, 0)
    if cfg.partition is not None and choices.get("partitions") and cfg.partition not in choices["partitions"]:
        raise SettingError("partition", cfg.partition, f"one of {', '.join(choices['partitions'])}")
    check_number("alpha", cfg.alpha, "a finite number > 0", lambda v: v > 0)
    check_integer("classes_per_client", cfg.classes_per_client, 1)
    check_number("fraction_fit", cfg.fraction_fit, "a number in (0, 1]", lambda v: 0 < v <= 1)
    check_number("synthetic_alpha", cfg.synthetic_alpha, "a finite number >= 0", lambda v: v >= 0)
    check_number("synthetic_beta", cfg.synthetic_beta, "a finite number >= 0", lambda v: v >= 0)
    for name in ("local_epochs", "local_steps", "batch_size"):  # TrainConfig checks them too; here the
        value = getattr(cfg, name)                                 # message names the setting first
        if value is not None:
            check_integer(name, value, 1)
    if cfg.lr == AUTO_LR and not spec.extra.get("auto_lr"):
        raise SettingError("lr", cfg.lr, f"a finite number > 0 (method '{spec.name}' has no rule that derives its "
                                         "step size: 'auto' is for the DO-ADP family)")
    cfg.train_config()  # lr, momentum, weight decay, lr decay, clipping
    if cfg.model is not None and choices.get("models") and cfg.model not in choices["models"]:
        raise SettingError("model", cfg.model, f"one of {', '.join(choices['models'])}")
    if cfg.data_dir is not None and not Path(cfg.data_dir).exists() and not (cfg.download or hf):
        raise SettingError("data_dir", cfg.data_dir, "an existing folder (or data file)")
    if cfg.backend not in BACKENDS:
        raise SettingError("backend", cfg.backend, f"one of {', '.join(BACKENDS)}")
    _check_device(cfg.device)
    check_number("client_cpus", cfg.client_cpus, "a finite number > 0", lambda v: v > 0)
    check_number("client_gpus", cfg.client_gpus, "a finite number >= 0", lambda v: v >= 0)
    check_integer("client_threads", cfg.client_threads, 1)
    if cfg.client_seed is not None:
        check_integer("client_seed", cfg.client_seed, 0)
    if cfg.client_timeout is not None and cfg.client_timeout != "auto":
        check_number("client_timeout", cfg.client_timeout, "'auto', a number of seconds > 0 (or None: no limit)",
                     lambda v: v > 0)
    check_number("synthetic_mean_samples", cfg.synthetic_mean_samples, "a finite number")
    for r, p in sorted(parse_failures(cfg.fail), key=lambda t: (t[0] or 0, t[1])):
        text = f"{'*' if r is None else r}:{p}"
        if not 0 <= p < cfg.num_clients:
            raise SettingError("fail", text, f"ROUND:PARTITION with PARTITION in 0..{cfg.num_clients - 1} "
                                             f"(num_clients {cfg.num_clients})")
        if r is not None and not 1 <= r <= cfg.rounds:
            raise SettingError("fail", text, f"ROUND:PARTITION with ROUND in 1..{cfg.rounds} (rounds {cfg.rounds})")
    if not isinstance(cfg.overwrite, bool):
        raise SettingError("overwrite", cfg.overwrite, "true or false")
    if cfg.out is not None:
        out = Path(cfg.out)
        if out.exists() and not out.is_dir():
            raise SettingError("out", cfg.out, "a folder (it is an existing file; results.json goes inside the folder)")
        parent = next((p for p in (out, *out.parents) if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise SettingError("out", cfg.out, f"a folder path ({parent} is a file)")


def _check_device(device: str) -> None:
    if device == "cpu":  # always valid: no need to import torch to say so
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise SettingError("device", device, "cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingError("device", device, "cpu (CUDA is not available on this machine)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise SettingError("device", device, f"cuda:0..cuda:{torch.cuda.device_count() - 1}")


# -- Flower run config ----------------------------------------------------------------------------
def config_from_run_config(run_config: Mapping[str, Any], *, ignore: tuple[str, ...] = ("out-dir",)) -> ExperimentConfig:
    """The resolved, validated :class:`ExperimentConfig` of a Flower run config.

    Keys are the CLI flags without dashes (``weight-decay``, ``local-steps``...), plus
    ``num-server-rounds`` (rounds), ``set`` (``"key=value,key=value"``: method hyperparameters) and
    ``fail`` (``"ROUND:PARTITION,..."``). An empty string leaves a setting unset, so the method's
    paper defaults apply; values given are labelled ``"run config"`` in the provenance. Keys in
    ``ignore`` belong to the app (``out-dir``). An unknown key or a bad value raises, naming the key.
    """
    by_key = {run_config_key(name): name for name in RUN_CONFIG_SETTINGS}
    values: dict[str, Any] = {}
    for key, raw in run_config.items():
        if key in ignore:
            continue
        if key in SEED_RUN_CONFIG_KEYS:
            raise seed_in_run_config_error(key, raw)
        if key not in by_key:
            raise KeyError(f"run config key '{key}' is not an experiment setting; valid keys: {', '.join(sorted(by_key))}")
        name = by_key[key]
        if isinstance(raw, str) and raw.strip() == "":
            continue
        if name == "params":
            values["params"] = parse_pairs([s.strip() for s in str(raw).split(",") if s.strip()], "run config 'set'",
                                           "key=value pairs separated by commas")
        elif name == "fail":
            values["fail"] = [s.strip() for s in str(raw).split(",") if s.strip()]
        else:
            values[name] = typed_value(name, raw, f"run config '{key}'")
    sources = {name: "run config" for name in values if name in RESOLVED}
    if "params" in values:
        sources["params"] = {k: "run config" for k in values["params"]}
    cfg = ExperimentConfig(**values, progress=False, provenance=sources)
    try:
        return cfg.validate()
    except SettingError as err:
        raise SettingError(f"run config '{run_config_key(err.name)}'", err.value, err.requirement) from None


def parse_pairs(items: list[str], where: str, requirement: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict (dashes in keys become underscores); an item without ``=`` is a
    :class:`SettingError` of ``where``."""
    bad = next((item for item in items if "=" not in item), None)
    if bad is not None:
        raise SettingError(where, bad, requirement)
    return {k.strip().replace("-", "_"): v.strip() for k, v in (item.split("=", 1) for item in items)}


def typed_value(name: str, raw: Any, where: str) -> Any:
    """``raw`` as the type of setting ``name`` (ints stay ints, "none" switches an optional off, ``lr`` and
    ``client_timeout`` may be "auto"); a value that is not raises :class:`SettingError` naming ``where``."""
    if isinstance(raw, str) and name in OPTIONAL and raw.strip().lower() in NONE_WORDS:
        return raw.strip().lower()
    try:
        if isinstance(raw, bool) and name in INT_SETTINGS | FLOAT_SETTINGS:  # not a number, though Python's bool is one
            raise ValueError
        if name in INT_SETTINGS:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            return int(raw) if isinstance(raw, float) else int(str(raw).strip())
        if name in FLOAT_SETTINGS:
            if name in ("client_timeout", "lr") and str(raw).strip().lower() == "auto":
                return "auto"
            return float(raw)
    except ValueError:
        kind = "an integer" if name in INT_SETTINGS else "a number"
        raise SettingError(where, raw, kind) from None
    return str(raw)


def describe(value: Any, name: str) -> str:
    """A resolved value for display (None spelled out)."""
    if value is None:
        return NONE_MEANS.get(name, "none")
    return f"{value:g}" if isinstance(value, float) else str(value)
