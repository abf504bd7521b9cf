"""What both Flower adapters share: a method's declaration, its hyperparameters and its core.

A method is declared once, as a subclass of :class:`~flwr_strategies.adapters.LegacyStrategy`
(legacy API) and of :class:`~flwr_strategies.adapters.MessageStrategy` (Message API) that sets
four class attributes and a docstring:

- ``core_cls``: the method's :class:`~flwr_strategies.core.server.ServerCore` (or :class:`LazyCore`
  naming it, for a core whose module imports torch: reading the declaration then does not);
- ``hyperparameters``: ``{core keyword: frozen config dataclass}``. The method's hyperparameters
  are keyword arguments of the strategy, exactly the fields of these dataclasses, validated by them;
- ``arguments``: further keyword arguments the core takes as they are (FedMUD's ``model``,
  DO-ADP's ``num_rounds``...), ``{name: default}`` (:data:`REQUIRED` for none), and ``renamed``
  ``{argument: core keyword}`` where the two differ;
- ``federated_evaluation``: None, or why the method refuses federated evaluation.

Every such class gets its full constructor signature (:func:`method_signature`, set as
``__signature__`` when the class is defined): Flower's arguments for its API with Flower's names and
defaults, then every hyperparameter and argument as a keyword-only parameter with the method's
default, so ``inspect.signature``, ``help()`` and IDEs show them; the constructor accepts exactly
those (an unknown keyword is a ``TypeError`` naming the valid ones). A nested config field (FedLi's
``armijo``) also takes a dict of its fields: ``FedLiLS(armijo={"armijo_c": 0.5})``. A checkpoint
(:meth:`MethodAdapter.state_dict`) carries the method's name and hyperparameters, and loading it
under other values is refused naming them (:meth:`MethodAdapter.load_state_dict`).

:class:`MethodAdapter` turns those into the core (:meth:`MethodAdapter.build_core`, built when the
first round starts: the initial model is the one Flower passes in, the number of clients the
number that connected), checks Flower's arguments against the method, and keeps the global model
in step with what Flower passes back (:meth:`MethodAdapter.sync_global`): when a strategy wrapper
(Flower's differential-privacy wrappers, a user's own) changed the model, a centralized method
continues from the changed model, and a method that cannot take it raises
:class:`~flwr_strategies.core.server.ExternalModelError` naming the situation.
"""

from __future__ import annotations

import dataclasses
import inspect
import secrets
import textwrap
import typing
from collections.abc import Callable, Mapping
from logging import WARNING
from typing import Any, ClassVar

import numpy as np
from flwr.common import log

from ..common import CLIENT_STATE_KEPT, CLIENT_STATE_KEY, CLIENT_STATE_RESUMED
from ..core.declare import declared, field_default
from ..core.server import EvalFn, ExternalModelError, ServerCore
from ..core.validation import check_integer, check_policy, is_int
from .recorder import RoundRecorder, RoundSession

__all__ = ["MethodAdapter", "LazyCore", "REQUIRED", "build_configs", "class_kwargs", "CoreFactory", "HYPERPARAMETERS", "hyperparameter_section", "method_signature"]

#: Default of a required keyword argument in ``arguments``.
REQUIRED: Any = object()

#: ``(initial_arrays, num_partitions) -> ServerCore``.
CoreFactory = Callable[[list[np.ndarray], int], ServerCore]

PEER_NOTE = ("every peer keeps its own model, and the network average the strategy reports is a summary no peer "
             "trains from, so a changed average cannot reach the peers")


def _fields(config: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(config)]


def _default(config: Any, name: str) -> Any:
    """:func:`~flwr_strategies.core.declare.field_default` of field ``name`` of ``config``;
    ``inspect.Parameter.empty`` for a field without one."""
    default = field_default(config, next(f for f in dataclasses.fields(config) if f.name == name))
    return inspect.Parameter.empty if default is dataclasses.MISSING else default


def _owners(cls: type) -> dict[str, str]:
    """``{hyperparameter: core keyword of its config}``; a field declared by two configs is refused."""
    owner: dict[str, str] = {}
    for key, config in cls.hyperparameters.items():
        for field in _fields(config):
            if field in owner:
                raise TypeError(f"{cls.__name__} declares '{field}' in two configs ({owner[field]}, {key})")
            owner[field] = key
    return owner


def _parameters(function: Callable[..., Any]) -> list[inspect.Parameter]:
    """``function``'s parameters without ``self`` and ``*args``/``**kwargs``, annotations evaluated."""
    try:
        signature = inspect.signature(function, eval_str=True)
    except (NameError, TypeError):
        signature = inspect.signature(function)
    return [p for p in list(signature.parameters.values())[1:]
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]


def method_signature(cls: type) -> inspect.Signature | None:
    """The constructor signature of a method's strategy class: the adapter's arguments (Flower's
    FedAvg arguments for its API and the adapter's own, with the defaults a subclass's
    ``__init__`` sets), then every hyperparameter (the fields of the ``hyperparameters`` configs,
    annotated from the dataclasses, with the method's defaults) and every ``arguments`` entry, as
    keyword-only parameters. No ``**kwargs``: the constructor accepts exactly these. None for a
    subclass whose own ``__init__`` adds arguments of its own (its ``__init__`` is then its signature)."""
    adapter = next(k for k in cls.__mro__ if MethodAdapter in k.__bases__)
    overrides: dict[str, Any] = {}
    for klass in cls.__mro__[:cls.__mro__.index(adapter)]:
        if "__init__" in klass.__dict__:
            for p in _parameters(klass.__dict__["__init__"]):
                overrides.setdefault(p.name, p.default)
    params = [p.replace(default=overrides.pop(p.name)) if p.name in overrides else p
              for p in _parameters(adapter.__dict__["__init__"])]
    if overrides:  # a subclass whose own __init__ adds arguments: Python reads its signature from that __init__
        return None
    taken = {p.name for p in params}
    for key, config in cls.hyperparameters.items():
        dataclass = config if isinstance(config, type) else type(config)
        try:
            hints = typing.get_type_hints(dataclass)
        except (NameError, TypeError):
            hints = {}
        for field in dataclasses.fields(dataclass):
            default, annotation = _default(config, field.name), hints.get(field.name, field.type)
            if dataclasses.is_dataclass(default) and not isinstance(annotation, str):  # also a dict of its fields
                annotation = annotation | Mapping[str, Any]
            params.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))
    for name, default in cls.arguments.items():
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if default is REQUIRED else default))
    clash = sorted(taken & {p.name for p in params[len(taken):]})
    if clash:
        raise TypeError(f"{cls.__name__}: hyperparameters {clash} clash with the adapter's arguments")
    _owners(cls)
    return inspect.Signature(params)


#: The heading of the section :func:`hyperparameter_section` adds to a strategy class's docstring.
HYPERPARAMETERS = "Hyperparameters\n---------------"


def hyperparameter_section(cls: type) -> str:
    """The docstring section listing each hyperparameter of ``cls`` as its config declares it:
    ``name = default (valid range)``, its meaning and the default's source
    (:func:`~flwr_strategies.core.declare.setting`); a nested config's summary, then its fields under
    its name. Empty for a class without hyperparameters."""
    lines: list[str] = []

    def add(config: Any, prefix: str) -> None:
        for field in dataclasses.fields(config):
            default = _default(config, field.name)
            if dataclasses.is_dataclass(default) and not isinstance(default, type):
                lines.append(f"{prefix}{field.name} : {type(default).__name__} (or a dict of its fields)")
                lines.append(f"    {inspect.getdoc(default).splitlines()[0]}")
                add(default, f"{prefix}{field.name}.")
                continue
            entry = declared(config, flatten=False)[field.name]
            lines.append(f"{prefix}{field.name} = {default!r} ({entry[1]})")
            lines.extend(f"    {line}" for line in textwrap.wrap(field.metadata.get("doc", ""), 96,
                                                                    break_on_hyphens=False))
            lines.append(f"    Source: {entry[2]}")

    for config in cls.hyperparameters.values():
        add(config, "")
    return f"\n\n{HYPERPARAMETERS}\n" + "\n".join(lines) if lines else ""


def _plain(value: Any) -> Any:
    """``value`` as a checkpoint stores it (and gives it back): dataclasses as dicts, tuples as
    lists, NumPy scalars as Python numbers."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _prefix(err: Exception, name: str) -> None:
    """Start ``err``'s message with the user's class name (the exception keeps its type)."""
    if err.args and isinstance(err.args[0], str) and not err.args[0].startswith(name):
        err.args = (f"{name}: {err.args[0]}",) + tuple(err.args[1:])


class LazyCore:
    """A ``core_cls`` given as ``"module:Class"`` and imported when first read, so that importing the
    strategy class (to read its hyperparameters: ``python -m simulations defaults``) does not import
    the core's own dependencies (FedMeZO's torch)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __get__(self, obj: Any, owner: type | None = None) -> type[ServerCore]:
        from ..registry import load_object

        return load_object(self.path)


def build_configs(cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """The configs ``{core keyword: dataclass instance}`` that ``cls(**given)`` holds: each config of
    ``cls.hyperparameters`` with the fields ``given`` names (validated by the config; a nested config
    given as a dict is the method's default with those fields changed). Keys that are not fields are ignored."""
    name = cls.__name__
    configs: dict[str, Any] = {}
    for key, config in cls.hyperparameters.items():
        values = {}
        for field in _fields(config):
            if field not in given:
                continue
            value, default = given[field], _default(config, field)
            if isinstance(value, Mapping) and dataclasses.is_dataclass(default):
                try:  # a nested config given as a dict: the method's default with those fields changed
                    value = dataclasses.replace(default, **value)
                except (TypeError, ValueError) as err:
                    _prefix(err, f"{name}: {field}")
                    raise
            values[field] = value
        try:  # an instance holds a method's own defaults (FedLMT's FedMUDConfig): the given fields replaced
            configs[key] = config(**values) if isinstance(config, type) else dataclasses.replace(config, **values)
        except (TypeError, ValueError) as err:
            _prefix(err, name)
            raise
    return configs


def class_kwargs(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameter keyword arguments of ``cls`` among ``values``, a flat ``{setting: value}``
    (the command line's ``--set`` keys): each config field ``values`` names, and a nested config's
    fields gathered into a dict under its name (FedLi-LS's ``armijo``)."""
    out: dict[str, Any] = {}
    for config in cls.hyperparameters.values():
        for field in _fields(config):
            default = _default(config, field)
            if dataclasses.is_dataclass(default) and not isinstance(default, type):
                nested = {f: values[f] for f in _fields(default) if f in values}
                if nested:
                    out[field] = nested
            elif field in values:
                out[field] = values[field]
    return out


class MethodAdapter:
    """The declaration and the core of a method, shared by both Flower adapters."""

    #: The method's server core; None for an adapter over a ``core_factory``.
    core_cls: ClassVar[type[ServerCore] | None] = None
    #: ``{core keyword: frozen config dataclass}`` (or an instance of one holding the method's own
    #: defaults): the method's hyperparameters are their fields.
    hyperparameters: ClassVar[Mapping[str, Any]] = {}
    #: Further keyword arguments passed to the core as they are: ``{name: default or REQUIRED}``.
    arguments: ClassVar[Mapping[str, Any]] = {}
    #: ``{argument: core keyword}`` where an argument's name differs from the core's.
    renamed: ClassVar[Mapping[str, str]] = {}
    #: Why the method refuses federated evaluation (``fraction_evaluate > 0``); None: it allows it.
    federated_evaluation: ClassVar[str | None] = None
    #: The API's names (attributes; errors name them) of its training and evaluation fractions, its
    #: minimum of training clients and its per-round training config function.
    flower_names: ClassVar[tuple[str, str, str, str]] = ("fraction_train", "fraction_evaluate", "min_train_nodes",
                                                         "on_train_config_fn")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give every strategy class its full signature (:func:`method_signature`) and its
        hyperparameters' section (:func:`hyperparameter_section`), for ``inspect.signature``,
        ``help()`` and IDEs."""
        super().__init_subclass__(**kwargs)
        cls.__signature__ = method_signature(cls)
        doc = (inspect.getdoc(cls) or "").split(f"\n\n{HYPERPARAMETERS}\n")[0]
        cls.__doc__ = doc + hyperparameter_section(cls)

    # ------------------------------------------------------------------ construction
    def _init_method(self, *, hyperparameters: dict[str, Any], seed: int, on_bad_reply: str,
                     core_factory: CoreFactory | None, on_round_end: Callable[[dict[str, Any]], None] | None,
                     wait_timeout: float, max_num_examples: int | Mapping[int, int] | None) -> None:
        name = type(self).__name__
        if core_factory is None and self.core_cls is None:
            raise TypeError(f"{name} is not a method: subclass it with a core_cls, or pass core_factory")
        if core_factory is not None and hyperparameters and self.core_cls is not None:
            raise TypeError(f"{name}() got unexpected keyword arguments {sorted(hyperparameters)} "
                            "(a strategy over core_factory has no hyperparameters of its own)")
        check_integer(f"{name}: seed", seed, 0)
        if isinstance(wait_timeout, bool) or not isinstance(wait_timeout, (int, float)) or not wait_timeout > 0:
            raise ValueError(f"{name}: wait_timeout must be a number of seconds > 0, got {wait_timeout!r}")
        self.seed = int(seed)
        self.on_bad_reply = check_policy(on_bad_reply)
        self.wait_timeout = float(wait_timeout)
        self.core_factory = core_factory
        self.configs, self.method_arguments = self._split(hyperparameters)
        self.history = RoundRecorder(on_round_end)
        self.core: ServerCore | None = None
        self.round_offset = 0
        self._pending_state: dict[str, Any] | None = None
        #: Hyperparameters a resume permitted to differ from the checkpoint (:meth:`load_state_dict`).
        self.changed_on_resume: list[dict[str, Any]] = []
        #: The run's client-state key (:mod:`flwr_strategies.clients.store`): drawn once, carried by
        #: checkpoints and sent in every train config, so nodes find their state again after a resume.
        self.client_state_key = secrets.token_hex(16)
        self._first_trained: dict[int, int] = {}  # partition -> the first method round it was sent to train
        self._names: list[str] | None = None
        self.session = RoundSession(self.history, name, self.on_bad_reply, max_num_examples)
        if self.core_cls is not None:
            self._check_flower_arguments(self.core_cls)

    def _split(self, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The method's configs (``{core keyword: dataclass instance}``) and arguments from ``given``
        (the keywords of :attr:`__signature__` beyond the adapter's own)."""
        name = type(self).__name__
        owner = _owners(type(self))
        unknown = sorted(k for k in given if k not in owner and k not in self.arguments)
        if unknown:
            valid = sorted(owner) + sorted(self.arguments)
            hint = ""
            if "num_clients" in unknown or "num_partitions" in unknown:
                hint = (" The number of clients is learned from the clients that connect (min_available_clients / "
                        "min_available_nodes sets how many to wait for).")
            what = (f"an unexpected keyword argument '{unknown[0]}'" if len(unknown) == 1
                    else f"unexpected keyword arguments {unknown}")
            raise TypeError(f"{name}() got {what}; its method arguments are {valid or 'none'}.{hint}")
        missing = sorted(k for k, v in self.arguments.items() if v is REQUIRED and k not in given)
        if missing:
            raise TypeError(f"{name}() missing required keyword arguments {missing}")
        configs = build_configs(type(self), given)
        arguments = {k: given.get(k, default) for k, default in self.arguments.items()}
        return configs, arguments

    def _check_flower_arguments(self, core_cls: type) -> None:
        """Refuse Flower arguments the method cannot honour (the fractions of :attr:`flower_names`),
        with an error naming the user's class."""
        name, names = type(self).__name__, self.flower_names
        fraction_train, fraction_evaluate = (getattr(self, n) for n in names[:2])
        if getattr(core_cls, "full_participation", False) and fraction_train != 1.0:
            raise ValueError(f"{name}: every peer of a decentralized method trains every round, so {names[0]} must "
                             f"be 1.0 (Flower's default), got {fraction_train!r}")
        reason = self.federated_evaluation
        if reason is None and getattr(core_cls, "federated_evaluation_allowed", True) is False:
            reason = getattr(core_cls, "federated_evaluation_note", "the method does not allow it")
        if reason is not None and fraction_evaluate != 0.0:
            raise ValueError(f"{name}: federated evaluation is refused ({names[1]} must be 0.0, got "
                             f"{fraction_evaluate!r}): {reason}")

    @property
    def config(self) -> Any:
        """The method's hyperparameters (its config dataclass instance; None for a method without)."""
        return self.configs.get("config")

    # ------------------------------------------------------------------ the core
    def build_core(self, initial_arrays: list[np.ndarray], num_partitions: int) -> ServerCore:
        """The method's core for ``num_partitions`` clients, starting from ``initial_arrays``.

        The strategy builds it when the first round starts (from the model Flower passes in and
        the clients that connected); call it yourself to inspect a core without a run.
        """
        if self.core_factory is not None:
            core = self.core_factory(initial_arrays, num_partitions)
            if not isinstance(core, ServerCore):
                raise TypeError(f"core_factory must return a ServerCore, got {type(core).__name__}")
            return core
        cls = self.core_cls
        peers = bool(getattr(cls, "full_participation", False))
        kwargs: dict[str, Any] = dict(self.configs)
        arguments = self.resolve_arguments(dict(self.method_arguments), self._names)
        kwargs.update({self.renamed.get(k, k): v for k, v in arguments.items()})
        fraction, _, minimum, config_fn = (getattr(self, n) for n in self.flower_names)
        kwargs["seed"] = self.seed
        kwargs["on_train_config"] = config_fn
        if peers or getattr(cls, "needs_num_partitions", False):
            kwargs["num_partitions"] = int(num_partitions)
        if not peers:  # a fraction of 0 (Message API) samples in no round
            kwargs["fraction_train"] = fraction or 1.0
            kwargs["min_train"] = max(1, minimum)
        try:
            return cls(initial_arrays, **kwargs)
        except (TypeError, ValueError) as err:
            _prefix(err, type(self).__name__)
            raise

    def resolve_arguments(self, arguments: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
        """The method arguments as the core takes them (``names``: the model's array names, when
        known). Default: unchanged."""
        return arguments

    def _install_core(self, core: ServerCore) -> ServerCore:
        if self.core_factory is not None:
            self._check_flower_arguments(type(core))
        if self._pending_state is not None:
            core.load_state_dict(self._pending_state)
            self._pending_state = None
        self.core = core
        self.round_offset = int(core.server_round)
        return core

    # ------------------------------------------------------------------ checkpoints
    def method_name(self) -> str | None:
        """The method a checkpoint of this strategy belongs to: the class name (the same on both
        APIs); None for a strategy over a ``core_factory`` (its core's class is checked instead)."""
        return type(self).__name__ if self.core_cls is not None else None

    def hyperparameter_values(self) -> dict[str, Any]:
        """Every hyperparameter (the fields of the method's configs) with its value, as a
        checkpoint stores it: nested configs as dicts, tuples as lists, NumPy scalars as numbers."""
        return {f: _plain(getattr(cfg, f)) for cfg in self.configs.values() for f in _fields(cfg)}

    def state_dict(self) -> dict[str, Any]:
        """The core's :meth:`~flwr_strategies.core.server.ServerCore.state_dict` after the last
        completed round, with the method (``"strategy"``: :meth:`method_name`) and its
        hyperparameters (``"hyperparameters"``: :meth:`hyperparameter_values`), and the changes
        earlier resumes permitted (``"changed_on_resume"``)."""
        if self.core is None:
            raise RuntimeError(f"{type(self).__name__} has not started: nothing to checkpoint yet")
        return {**self.core.state_dict(), "strategy": self.method_name(),
                "hyperparameters": self.hyperparameter_values(), "changed_on_resume": list(self.changed_on_resume),
                "client_state_key": self.client_state_key,
                "client_state_partitions": sorted(p for p, r in self._first_trained.items()
                                                  if r <= self.core.server_round)}

    def load_state_dict(self, state: dict[str, Any], *, allow_changed: tuple[str, ...] | list[str] = ()) -> None:
        """Resume from a :meth:`state_dict`. Call it before the run: the core, built when the first
        round starts, then continues from the checkpoint (its model replaces the initial one), and
        Flower's rounds ``1, 2, ...`` are the method's rounds ``k + 1, k + 2, ...`` after a
        checkpoint taken at round ``k`` (see :attr:`round_offset`).

        The checkpoint must be of this method (the same class name, on either API) and carry the
        same hyperparameters: a differing value raises ``ValueError`` naming every one (the
        checkpoint's value and this strategy's), with nothing changed. ``allow_changed`` names
        hyperparameters that may differ (e.g. ``allow_changed=("lr",)``); the run continues with
        this strategy's values, and each permitted change is kept in :attr:`changed_on_resume`
        (``{"setting", "checkpoint", "now", "round"}``), logged, and carried by later checkpoints.
        The core then checks its own part (:meth:`~flwr_strategies.core.server.ServerCore.load_state_dict`).
        """
        name = type(self).__name__
        if not isinstance(state, dict):
            raise ValueError(f"{name}: a checkpoint is a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in ("strategy", "hyperparameters") if k not in state]
        if missing:
            raise ValueError(f"{name}: checkpoint lacks {', '.join(repr(k) for k in missing)} (not a "
                             f"{name}.state_dict(): a strategy's checkpoint carries its method and hyperparameters)")
        if state["strategy"] != self.method_name():
            raise ValueError(f"{name}: checkpoint is from {state['strategy'] or 'a strategy over core_factory'}, "
                             f"not {self.method_name() or 'a strategy over core_factory'}")
        own, saved = self.hyperparameter_values(), state["hyperparameters"]
        if not isinstance(saved, dict):
            raise ValueError(f"{name}: checkpoint 'hyperparameters' must be a dict, got {type(saved).__name__}")
        allowed = tuple(allow_changed)
        unknown = sorted(set(allowed) - set(own))
        if unknown:
            raise ValueError(f"{name}: allow_changed names {unknown}, which are not its hyperparameters "
                             f"({sorted(own)})")
        keys = sorted(set(own) | set(saved))
        differ = [k for k in keys if k not in saved or k not in own or _plain(saved[k]) != own[k]]
        refused = [k for k in differ if k not in allowed]
        if refused:
            shown = "; ".join(f"{k}: checkpoint {saved.get(k, '(absent)')!r}, this strategy {own.get(k, '(absent)')!r}"
                              for k in refused)
            raise ValueError(f"{name}: the checkpoint was taken under other hyperparameters ({shown}). Build the "
                             "strategy with the checkpoint's values, or name the ones meant to change in "
                             "load_state_dict(..., allow_changed=(...)).")
        history = state.get("changed_on_resume", [])
        if not isinstance(history, list):
            raise ValueError(f"{name}: checkpoint 'changed_on_resume' must be a list, got {type(history).__name__}")
        key = state.get("client_state_key", self.client_state_key)
        if not isinstance(key, str) or len(key) != 32 or key.strip("0123456789abcdef"):
            raise ValueError(f"{name}: checkpoint 'client_state_key' must be 32 lowercase hex digits, got {key!r:.80}")
        trained = state.get("client_state_partitions", [])
        if not isinstance(trained, list) or not all(is_int(p) and p >= 0 for p in trained):
            raise ValueError(f"{name}: checkpoint 'client_state_partitions' must be a list of partition ids, "
                             f"got {trained!r:.80}")
        core_state = {k: v for k, v in state.items()
                      if k not in ("strategy", "hyperparameters", "changed_on_resume", "client_state_key",
                                   "client_state_partitions")}
        if self.core is not None:
            self.core.load_state_dict(core_state)
            self.round_offset = int(self.core.server_round)
        else:
            self._pending_state = core_state
        changes = [{"setting": k, "checkpoint": saved[k], "now": own[k], "round": state.get("server_round")}
                   for k in differ]
        for change in changes:
            log(WARNING, "%s: resuming from round %s with %s = %r (the checkpoint has %r; allow_changed)", name,
                change["round"], change["setting"], change["now"], change["checkpoint"])
        self.changed_on_resume = list(history) + changes
        self.client_state_key = key
        self._first_trained = {int(p): 0 for p in trained}

    def client_state_config(self, partition_id: int, server_round: int) -> dict[str, Any]:
        """The train-config entries of partition ``partition_id`` in method round ``server_round``
        that let nodes keep their clients' state across Flower runs
        (:mod:`flwr_strategies.clients.store`): the run's client-state key, and in a resumed run the
        checkpoint's round and whether the partition trained at or before it (its client then holds
        state to restore). Records that the partition was sent to train."""
        first = self._first_trained.setdefault(int(partition_id), int(server_round))
        out: dict[str, Any] = {CLIENT_STATE_KEY: self.client_state_key}
        if self.round_offset:
            out[CLIENT_STATE_RESUMED] = int(self.round_offset)
            out[CLIENT_STATE_KEPT] = int(first <= self.round_offset)
        return out

    def method_round(self, server_round: int) -> int:
        """The method's round of Flower's ``server_round`` (they differ after a resume)."""
        return int(server_round) + self.round_offset

    def _evaluate_central(self, server_round: int, model: Any, initial: Callable[[int], Any], evaluate_fn: EvalFn):
        """``(round, (loss, metrics) | None)`` of central evaluation at Flower's ``server_round``,
        ``model`` being what Flower passes: before round 1 ``initial(round)`` scores the model Flower
        starts from, as Flower's own strategies do; then the core scores its model with
        ``evaluate_fn`` in the rounds the method evaluates. ``(None, None)`` before round 1 of a
        resumed run: the checkpoint's round was evaluated by the run that saved it."""
        if self.core is None or (server_round == 0 and self.core.server_round == 0):
            if self._pending_state is not None:
                return None, None
            return int(server_round), initial(int(server_round))
        rnd = self.method_round(server_round)
        self._follow(model, rnd)
        return rnd, self.core.evaluate(rnd, evaluate_fn) if self.core.should_evaluate(rnd) else None

    # ------------------------------------------------------------------ composition
    def sync_global(self, arrays: list[np.ndarray], server_round: int) -> None:
        """Continue from ``arrays``, the model Flower passes back when it is not the one the strategy
        returned (a strategy wrapper changed it); a method that cannot take it raises
        :class:`~flwr_strategies.core.server.ExternalModelError`. The adapters call it only when
        the model differs from their own last output."""
        core = self.core
        try:
            core.adopt_global_arrays([np.asarray(a) for a in arrays])
        except ExternalModelError as err:
            note = f" ({PEER_NOTE})" if core.full_participation else ""
            raise ExternalModelError(
                f"{type(self).__name__}, round {server_round}: the global model Flower passed back differs from "
                f"the one the strategy returned (a strategy wrapper such as Flower's differential-privacy wrappers, "
                f"or your own, changed it). {err}{note}"
            ) from err
        except ValueError as err:
            _prefix(err, f"{type(self).__name__}, round {server_round}")
            raise
        core.updated = True  # the adopted model is the global model from now on (ServerCore.model_arrays)
