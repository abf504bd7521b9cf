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

_METHOD_MODULES: tuple[str, ...] = (
    "flwr_strategies.baselines.centralized",
    "flwr_strategies.fedmezo.methods",
    "flwr_strategies.dfedcata.method",
    "flwr_strategies.doadp.method",
    "flwr_strategies.fedli.methods",
    "flwr_strategies.fedmud.methods",
)

_REGISTRY: dict[str, MethodSpec] = {}
_LOADED = False


@dataclass(frozen=True)
class MethodSpec:
    """How to build one method's strategy and client.

    Parameters
    ----------
    name : str
        Lower-case name used on the command line (``--method``).
    summary : str
        One line shown by ``python -m simulations list``.
    paper : str
        Citation of the paper the method comes from.
    defaults : Mapping[str, Any]
        Method hyperparameters settable with ``--set key=value``; the type of each default is the
        type values are parsed to.
    build_strategy : Callable[[ServerSetup, dict], Strategy]
        Builds the Flower strategy from the experiment's :class:`~flwr_strategies.setup.ServerSetup`
        and the resolved hyperparameters.
    build_client : Callable[[ClientSetup, dict], NumPyClient]
        Builds the matching client for one partition.
    task : str
        Workload the method runs on: ``"classification"`` (default) or a registered task name.
    decentralized : bool
        True for peer-graph methods emulated inside the strategy.
    """

    name: str
    summary: str
    paper: str
    defaults: Mapping[str, Any]
    build_strategy: Callable[..., Any]
    build_client: Callable[..., Any]
    task: str = "classification"
    decentralized: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


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
    """Parse ``text`` to the type of ``default`` (bool accepts true/false/1/0/yes/no)."""
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
        return None if text.lower() == "none" else text
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
