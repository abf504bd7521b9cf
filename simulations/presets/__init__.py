"""Experiment presets: named comparisons that reproduce a paper's setting at reduced scale.

A :class:`Preset` is a base configuration plus a list of :class:`RunEntry` (label, method,
overrides). The default runner (:func:`~flwr_strategies.simulations.compare.run_preset`) checks
every entry's settings, then runs every entry on the same partition and seed and writes
``summary.md`` and ``accuracy.png``; an entry that fails is reported and the others still run. A
preset can instead give a ``custom`` callable for sweeps and extra tables.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

_PRESET_MODULES: tuple[str, ...] = (
    "flwr_strategies.simulations.presets.quickstart",
    "flwr_strategies.simulations.presets.fedmezo",
    "flwr_strategies.simulations.presets.dfedcata",
    "flwr_strategies.simulations.presets.doadp",
    "flwr_strategies.simulations.presets.fedli",
    "flwr_strategies.simulations.presets.fedmud",
)

_PRESETS: dict[str, "Preset"] = {}


@dataclass(frozen=True)
class RunEntry:
    """One line of a comparison: a label, a method name and config overrides (incl. ``params``)."""

    label: str
    method: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class PresetContext:
    """What a custom preset runner gets: the preset, user overrides (``backend`` among them) and the
    output folder."""

    preset: "Preset"
    overrides: dict[str, Any]
    out_dir: Any


@dataclass(frozen=True)
class Preset:
    """A named comparison.

    Parameters
    ----------
    name : str
        Name for ``--preset``.
    summary : str
        One line shown by ``python -m simulations list``.
    base : dict
        ``ExperimentConfig`` settings shared by all entries. Settings left out take each method's
        paper defaults; settings given here are labelled ``"preset"`` in ``results.json``'s
        provenance (a custom runner gets the same with
        :func:`~flwr_strategies.simulations.compare.entry_config`).
    entries : list[RunEntry] | Callable[[], list[RunEntry]]
        The runs to compare, or a function that makes them when :func:`get_preset` first returns the
        preset (for entries that resolve methods' defaults, which imports the strategy classes:
        ``python -m simulations list`` stays cheap).
    target_accuracy : float | None
        Accuracy for the rounds-to-target column, or None.
    custom : Callable[[PresetContext], dict] | None
        Replaces the default runner (sweeps, extra tables). Returns a summary dict.
    """

    name: str
    summary: str
    base: dict[str, Any]
    entries: list[RunEntry] | Callable[[], list[RunEntry]]
    target_accuracy: float | None = None
    custom: Callable[[PresetContext], dict] | None = None


def register_preset(preset: Preset) -> None:
    """Add ``preset`` to the registry."""
    _PRESETS[preset.name] = preset


def list_presets() -> dict[str, Preset]:
    """All presets by name (importing the modules that register them)."""
    for module in _PRESET_MODULES:
        importlib.import_module(module)
    return dict(sorted(_PRESETS.items()))


def get_preset(name: str) -> Preset:
    """The preset called ``name`` with its entries made; an unknown name raises ``KeyError`` listing
    the valid ones."""
    presets = list_presets()
    if name not in presets:
        raise KeyError(f"unknown preset '{name}'; valid presets: {', '.join(presets)}")
    if callable(presets[name].entries):
        _PRESETS[name] = replace(presets[name], entries=presets[name].entries())
    return _PRESETS[name]
