"""One declaration per hyperparameter: its default, valid range, source and meaning, on the config dataclass field.

A method's config dataclass declares each field with :func:`setting`::

    beta: float = setting(0.99, "[0, 1)", "paper: App. A-A, Table IV", "Extrapolation coefficient.")

so ``dataclasses.fields`` reads the default, the range (``metadata["range"]``), where the default
comes from (``metadata["source"]``: ``"paper: <section>"``, ``"official code: <file>"`` or
``"project: <reason>"``) and what the field means (``metadata["doc"]``). The strategy classes take
these fields as keyword arguments with these defaults and list them in their docstrings (the
"Hyperparameters" section ``help()`` shows), and the command line (``python -m simulations defaults
METHOD``) prints them from here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["SOURCE_KINDS", "setting", "sourced", "declared", "field_default"]

#: The kinds of source a default has: ``"KIND: where"``.
SOURCE_KINDS = ("paper", "official code", "project")


def _check_source(source: str) -> None:
    if source.split(":", 1)[0] not in SOURCE_KINDS or ":" not in source:
        raise ValueError(f"source must be 'KIND: where' with KIND in {SOURCE_KINDS}, got {source!r}")


def setting(default: Any, range: str, source: str, doc: str) -> Any:  # noqa: A002 - the field's valid range
    """A dataclass field with ``default``, its valid ``range`` (text, e.g. ``"[0, 1)"``), ``source``
    and ``doc``, what the field means (the docstrings' "Hyperparameters" section prints it)."""
    _check_source(source)
    if not doc:
        raise ValueError(f"doc must say what the field means (source {source!r})")
    return dataclasses.field(default=default, metadata={"range": range, "source": source, "doc": doc})


def sourced(config: Any, **sources: str) -> Any:
    """``config``, an instance holding a method's own defaults (DO-ADP's peer graph, FedLMT's
    FedMUDConfig), with the source of each value it changes from its dataclass's default (and of
    any other field whose source differs for this method)."""
    changed = [f.name for f in dataclasses.fields(config)
               if f.default is not dataclasses.MISSING and getattr(config, f.name) != f.default]
    names = {f.name for f in dataclasses.fields(config)}
    if not set(changed) <= set(sources) <= names:
        raise ValueError(f"{type(config).__name__}: give the source of every changed default {sorted(changed)} "
                         f"(and only of its fields), got {sorted(sources)}")
    for text in sources.values():
        _check_source(text)
    object.__setattr__(config, "__sources__", dict(sources))
    return config


def declared(config: Any, *, flatten: bool = True) -> dict[str, tuple[Any, str | None, str | None]]:
    """``{field: (default, range, source)}`` of a config dataclass, or of an instance (its values
    are then the defaults). With ``flatten``, a field holding a nested config contributes that
    config's fields instead (FedLi-LS's ``armijo``)."""
    out: dict[str, tuple[Any, str | None, str | None]] = {}
    for field in dataclasses.fields(config):
        default = field_default(config, field)
        if default is dataclasses.MISSING:
            continue
        if flatten and dataclasses.is_dataclass(default) and not isinstance(default, type):
            out.update(declared(default))
            continue
        source = getattr(config, "__sources__", {}).get(field.name, field.metadata.get("source"))
        out[field.name] = (default, field.metadata.get("range"), source)
    return out


def field_default(config: Any, field: dataclasses.Field) -> Any:
    """The default of ``field`` of ``config``: a dataclass's default (or its factory's value), or for
    an instance holding a method's own defaults, its value; ``dataclasses.MISSING`` for none."""
    if not isinstance(config, type):
        return getattr(config, field.name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default
