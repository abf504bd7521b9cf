"""Registry of federated methods by name.

Each method module calls :func:`register_method` at import time with a :class:`MethodSpec`. The
modules are listed in ``_METHOD_MODULES`` and imported lazily on first lookup, so importing
``flwr_strategies`` stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .core.declare import declared

_METHOD_MODULES: tuple[str, ...] = (
    "flwr_strategies.baselines.registration",
    "flwr_strategies.fedmezo.registration",
    "flwr_strategies.dfedcata.registration",
    "flwr_strategies.doadp.registration",
    "flwr_strategies.fedli.registration",
    "flwr_strategies.fedmud.registration",
)

_REGISTRY: dict[str, MethodSpec] = {}
_LOADED = False

#: Where a training default came from (``MethodSpec.train_defaults``; shown by ``--help`` and results.json).
#: A default's provenance is ``"KIND: where"`` (``"paper: Table 2"``); KIND is one of these.
PROVENANCES = ("paper", "official code", "project", "user")


def load_object(path: Any) -> Any:
    """The object at ``"package.module:attribute"`` (imported on first use); an object given as it is."""
    if not isinstance(path, str):
        return path
    if ":" not in path:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    module, attr = path.split(":", 1)
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class MethodSpec:
    """How to build one method: its server core, its strategies (both Flower APIs) and its client.

    Parameters
    ----------
    name : str
        Lower-case name used on the command line (``--method``).
    summary : str
        One line shown by ``python -m simulations list``.
    paper : str
        Citation of the paper the method comes from.
    strategy : str | type
        The method's legacy strategy class, or its ``"module:Class"``. Its configs (``Class.hyperparameters``)
        declare the method's hyperparameters, settable with ``--set key=value``: each field's default
        and source (:func:`~flwr_strategies.core.declare.setting`) is what the command line uses and
        prints; a nested config contributes its fields. The type of each default is the type values
        are parsed to.
    core_arguments : Callable[[ServerSetup, dict], dict] | None
        The core's keyword arguments besides the class's configs, from the experiment's
        :class:`~flwr_strategies.setup.ServerSetup` and the resolved hyperparameters (FedMUD's
        ``model``; a method's checks of the run's training settings go here, so they fail before
        training); default :func:`core_kwargs`. The core is the strategy class's ``core_cls`` over
        the configs that ``Class(k=v)`` holds for the ``--set`` values (:meth:`build_core`); both
        Flower adapters are derived from it (:meth:`legacy_strategy`, :meth:`message_strategy`).
    derive : Callable[[dict, ServerSetup | None], dict] | None
        The class values the run sets from its own settings (:attr:`derived`, e.g. DFedCata's ``lr``
        from ``--lr``) or from another setting (FedLi's ``variant=code``): ``(params, setup) ->
        {key: value}``, applied over the ``--set`` values before the class is built.
    client : str | Callable | None
        The client class (or a factory) called as ``(ClientSetup, params) -> NumPyClient``, or its
        dotted path ``"flwr_strategies.clients.<method>:<Class>"``; a path is imported only when a
        client is built, so the algorithm core never imports the client layer.
    train_defaults : Mapping[str, tuple[Any, str]]
        The method's own training settings (``lr``, ``lr_decay``, ``local_epochs``,
        ``local_steps``, ``batch_size``, ``weight_decay``, ``momentum``, ``grad_clip``,
        ``fraction_fit``, ``num_clients``...) as ``(value, provenance)``; provenance is one of
        :data:`PROVENANCES`. They apply unless the user sets the value. A value may depend on the
        dataset: ``({"cifar10": 0.1, "*": 0.05}, "paper")`` (``"*"`` for any other dataset), and an
        entry may carry its own provenance: ``({"digits": (1.0, "project"), "*": (0.01, "paper")}, "paper")``.
    task : str
        Workload the method runs on: ``"classification"`` (default) or a registered task name.
    settings : tuple[type | str, ...]
        Further config dataclasses (or their ``"module:Class"``) whose fields are ``--set`` keys the
        strategy class does not take (the clients' own settings, e.g. DFedAvgM's ``local_momentum``),
        declared the same way.
    overrides : Mapping[str, tuple]
        The values the command line runs instead of the declared default, each named with its
        reason, printed by ``python -m simulations defaults METHOD`` and recorded in results:
        ``{key: (value, source)}``, or ``{key: (driver, {driver_value: (value, source), "*": ...})}``
        for a value that follows a resolved setting (``"model"``, ``"dataset"``) or another
        hyperparameter (``"params.decomp"``; ``"*"`` matches any other value).
    derived : Mapping[str, str]
        Fields of the strategy's configs that the run sets from its own settings rather than from
        ``--set`` (DFedCata's ``lr`` from ``--lr``): ``{field: what sets it}``.
    extra : Mapping[str, Any]
        Further facts about the method (``"auto_lr"``: the method derives ``lr="auto"``).
    """

    name: str
    summary: str
    paper: str
    strategy: str | type
    core_arguments: Callable[..., dict] | None = None
    derive: Callable[..., dict] | None = None
    client: str | Callable[..., Any] | None = None
    train_defaults: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    task: str = "classification"
    settings: tuple[type | str, ...] = ()
    overrides: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    derived: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, item in self.train_defaults.items():
            if not (isinstance(item, tuple) and len(item) == 2 and str(item[1]).split(":")[0] in PROVENANCES):
                raise ValueError(f"method '{self.name}': train_defaults['{key}'] must be (value, one of {PROVENANCES})")
        if self.client is None:
            raise ValueError(f"method '{self.name}' needs a client factory")

    def declaration(self) -> dict[str, tuple[Any, str | None, str | None]]:
        """``{key: (default, range, source)}`` of every ``--set`` key, as the strategy class and
        :attr:`settings` declare them (before :attr:`overrides`)."""
        configs = list(load_object(self.strategy).hyperparameters.values())
        out: dict[str, tuple[Any, str | None, str | None]] = {}
        for config in configs + [load_object(c) for c in self.settings]:  # the strategy's own declaration first
            for key, entry in declared(config).items():
                out.setdefault(key, entry)
        for key in self.derived:
            out.pop(key, None)
        return out

    @property
    def strategy_name(self) -> str:
        """The strategy class's name (without importing it when given as ``"module:Class"``)."""
        return self.strategy.split(":")[1] if isinstance(self.strategy, str) else self.strategy.__name__

    def declared_training(self) -> dict[str, tuple[Any, str | None]]:
        """``{setting: (default, source)}`` of each :attr:`derived` field the strategy class declares
        (FedMeZO's ``lr``, ``local_steps``...): the default of the run's own setting unless
        :attr:`train_defaults` names another value, which is then a named override of the class's."""
        configs = load_object(self.strategy).hyperparameters.values()
        own = {k: (v[0], v[2]) for config in configs for k, v in declared(config).items()}
        return {k: own[k] for k in self.derived if k in own}

    @property
    def defaults(self) -> dict[str, Any]:
        """``{key: value}`` the command line starts from: the declared defaults with the fixed
        :attr:`overrides` applied (a value that follows another setting is resolved later)."""
        values = {k: v[0] for k, v in self.declaration().items()}
        values.update({k: v for k, (v, source) in self.overrides.items() if not isinstance(source, Mapping)})
        return values

    @property
    def sources(self) -> dict[str, str | None]:
        """``{key: source}`` of :attr:`defaults` (an override's own source where one applies)."""
        out = {k: v[2] for k, v in self.declaration().items()}
        out.update({k: s for k, (_, s) in self.overrides.items() if not isinstance(s, Mapping)})
        return out

    def class_arguments(self, params: Mapping[str, Any], setup: Any = None) -> dict[str, Any]:
        """The keyword arguments of the strategy class that the resolved ``--set`` values ``params``
        give (``Class(k=v)``), with :attr:`derive`'s values; the :attr:`settings` configs (the
        clients' own) are validated on the way, so a bad value fails before training."""
        from .adapters.method import class_kwargs

        for config in self.settings:
            config = load_object(config)
            config(**{k: params[k] for k in config.__dataclass_fields__ if k in params})
        values = {**params, **(self.derive(dict(params), setup) if self.derive else {})}
        return class_kwargs(load_object(self.strategy), values)

    def configs(self, params: Mapping[str, Any], setup: Any = None) -> dict[str, Any]:
        """The configs ``{core keyword: dataclass instance}`` of ``Class(**class_arguments(params, setup))``."""
        from .adapters.method import build_configs

        return build_configs(load_object(self.strategy), self.class_arguments(params, setup))

    def build_core(self, setup: Any, params: dict) -> Any:
        """The method's server core for the experiment: the strategy class's ``core_cls`` over the
        configs the class builds from ``params`` (:meth:`configs`) and :attr:`core_arguments`."""
        kwargs = self.core_arguments(setup, params) if self.core_arguments else core_kwargs(setup)
        return load_object(self.strategy).core_cls(setup.initial_parameters, **self.configs(params, setup), **kwargs)

    def build_client(self, setup: Any, params: dict) -> Any:
        """The method's client for ``(setup, params)``, built by :attr:`client` (imported on first use)."""
        return load_object(self.client)(setup, params)

    def _factory(self, setup: Any, params: dict):
        """``(initial_arrays, num_partitions) -> core`` for the adapters; the first core is built
        now, so a setting the method rejects fails before any client connects."""
        first = [self.build_core(setup, params)]

        def core(initial_arrays, num_partitions):
            built = first.pop() if first else self.build_core(setup, params)
            if built.num_partitions is not None and built.num_partitions != num_partitions:
                raise ValueError(f"method '{self.name}' was set up for {built.num_partitions} clients but "
                                 f"{num_partitions} connected")
            return built

        return core

    def max_num_examples(self, setup: Any) -> dict[int, int] | None:
        """The bound on each reply's ``num_examples`` in a run of ``setup``: each partition's size
        (``setup.num_examples``, what the project's clients report, as Flower's examples do with
        ``len(trainset)``), so no client can weigh more than its own data. None when the sizes
        are not known, and for the ``causal-lm`` task, whose clients report the examples they saw
        in the round (FedMeZO: local steps x batch size), which may exceed the partition."""
        if not setup.num_examples or self.task != "classification":
            return None
        return {int(p): max(1, int(n)) for p, n in setup.num_examples.items()}

    def legacy_strategy(self, setup: Any, params: dict, **kwargs: Any) -> Any:
        """A :class:`~flwr_strategies.adapters.LegacyStrategy` over this method's core, set up for
        the experiment (all its clients, its sampling, no federated evaluation unless ``kwargs``
        ask for it, ``max_num_examples`` from the partitions: :meth:`max_num_examples`)."""
        from .adapters.legacy import LegacyStrategy

        kwargs.setdefault("max_num_examples", self.max_num_examples(setup))
        kwargs.setdefault("min_available_clients", setup.num_clients)
        kwargs.setdefault("fraction_evaluate", 0.0)
        return LegacyStrategy(core_factory=self._factory(setup, params), initial_parameters=setup.initial_parameters,
                              evaluate_fn=setup.evaluate_fn, fraction_fit=setup.fraction_fit,
                              min_fit_clients=setup.clients_per_round, seed=setup.seed, **kwargs)

    def message_strategy(self, setup: Any, params: dict, **kwargs: Any) -> Any:
        """A :class:`~flwr_strategies.adapters.MessageStrategy` over this method's core (the same
        set-up as :meth:`legacy_strategy`)."""
        from .adapters.message import MessageStrategy

        kwargs.setdefault("max_num_examples", self.max_num_examples(setup))
        kwargs.setdefault("fraction_evaluate", 0.0)
        kwargs.setdefault("min_available_nodes", setup.num_clients)
        return MessageStrategy(fraction_train=setup.fraction_fit, min_train_nodes=setup.clients_per_round,
                               seed=setup.seed, core_factory=self._factory(setup, params), **kwargs)


def core_kwargs(setup: Any) -> dict[str, Any]:
    """:class:`~flwr_strategies.core.server.ServerCore` arguments of a centralized method from the
    experiment's :class:`~flwr_strategies.setup.ServerSetup`."""
    return {"num_partitions": setup.num_clients, "fraction_train": setup.fraction_fit,
            "min_train": setup.clients_per_round, "seed": setup.seed, "on_train_config": setup.fit_config}


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry (a second registration under the same name is an error)."""
    name = spec.name.lower()
    if name in _REGISTRY and _REGISTRY[name] is not spec:
        raise ValueError(f"method '{name}' is already registered")
    _REGISTRY[name] = spec
    return spec


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    for module in _METHOD_MODULES:
        importlib.import_module(module)
    _LOADED = True


def list_methods() -> dict[str, MethodSpec]:
    """All registered methods by name, sorted."""
    _load()
    return dict(sorted(_REGISTRY.items()))


def get_method(name: str) -> MethodSpec:
    """The method called ``name``; an unknown name raises ``KeyError`` listing the valid ones."""
    methods = list_methods()
    key = name.lower()
    if key not in methods:
        raise KeyError(f"unknown method '{name}'; valid methods: {', '.join(methods)}")
    return methods[key]


def parse_value(default: Any, text: str) -> Any:
    """Parse ``text`` to the type of ``default`` (bool accepts true/false/1/0/yes/no; a number or
    None also accepts ``none``, for a setting whose None has a meaning)."""
    if text.strip().lower() == "none" and (default is None or type(default) in (int, float)):
        return None
    if isinstance(default, bool):
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got '{text}'")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if default is None:
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                pass
    return text


def resolve_params(spec: MethodSpec, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults of ``spec`` updated with ``overrides``; an unknown key raises ``KeyError`` naming it."""
    params = dict(spec.defaults)
    for key, value in (overrides or {}).items():
        if key not in params:
            valid = ", ".join(sorted(params)) or "(none)"
            raise KeyError(f"method '{spec.name}' has no parameter '{key}'; its parameters: {valid}")
        params[key] = parse_value(params[key], value) if isinstance(value, str) else value
    return params
