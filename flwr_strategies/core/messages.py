"""What crosses the wire between a server core and its clients, in framework-neutral form.

A :class:`~flwr_strategies.core.server.ServerCore` speaks only in these types. The adapters turn
them into Flower's legacy ``FitIns``/``FitRes`` or Message-API ``Message`` objects and back, so the
algorithm never sees a Flower type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Instruction", "Reply", "ArraySpec", "ReplySpec", "Scalar"]

Scalar = bool | int | float | str | bytes


@dataclass
class Instruction:
    """What the server sends one client in one round.

    Parameters
    ----------
    partition_id : int
        The client (data partition / peer index) this instruction is for.
    arrays : list[np.ndarray]
        Payload arrays (the model, a start point, factors, a consensus term...).
    config : dict[str, Scalar]
        Scalars for the client (learning rate, round, method constants).
    model_layout : bool
        True when ``arrays`` are the model itself in the order and shapes of the initial model,
        so the Message-API adapter can name them like the user's ``state_dict``.
    """

    partition_id: int
    arrays: list[np.ndarray]
    config: dict[str, Any] = field(default_factory=dict)
    model_layout: bool = True


@dataclass
class Reply:
    """One client's answer to an :class:`Instruction`.

    Parameters
    ----------
    partition_id : int
        Partition the reply is from (as the transport established it, not as the client claims).
    arrays : list[np.ndarray]
        Returned arrays.
    num_examples : int
        Local examples used (the aggregation weight of FedAvg-style methods), >= 0.
    metrics : dict[str, Scalar]
        Returned scalars (``train_loss``, method-specific reports).
    """

    partition_id: int
    arrays: list[np.ndarray]
    num_examples: int
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ArraySpec:
    """Expected shape and dtype of one returned array.

    ``kind`` is a NumPy dtype kind group: ``"f"`` (real floating), ``"i"`` (signed or unsigned
    integer), ``"b"`` (bool) or ``"*"`` (anything). ``dtype``, when set, is the exact dtype
    (``np.dtype(...).str``, byte order included) and takes precedence over ``kind``. ``shape``
    entries of ``-1`` accept any length.
    """

    shape: tuple[int, ...]
    kind: str = "f"
    dtype: str | None = None

    @classmethod
    def like(cls, array: np.ndarray) -> "ArraySpec":
        """The spec matching ``array`` exactly (shape and dtype)."""
        a = np.asarray(array)
        return cls(tuple(int(s) for s in a.shape), dtype_group(a.dtype), a.dtype.str)


@dataclass(frozen=True)
class ReplySpec:
    """What a valid reply to one instruction looks like (checked before any state changes).

    Parameters
    ----------
    arrays : Sequence[ArraySpec] | None
        Expected arrays in order; None accepts any arrays (the core then checks them itself in
        :meth:`~flwr_strategies.core.server.ServerCore.check_reply`).
    required_metrics : Sequence[str]
        Metric keys that must be present, numeric and finite.
    allow_empty : bool
        Accept a reply with zero arrays (e.g. an inactive DO-ADP agent), in addition to ``arrays``.
    """

    arrays: Sequence[ArraySpec] | None = None
    required_metrics: Sequence[str] = ()
    allow_empty: bool = False

    @classmethod
    def like(cls, arrays: Sequence[np.ndarray], required_metrics: Sequence[str] = ()) -> "ReplySpec":
        """Replies must have exactly the shapes and dtypes of ``arrays``."""
        return cls(tuple(ArraySpec.like(a) for a in arrays), tuple(required_metrics))


def dtype_group(dtype: np.dtype) -> str:
    """``"f"`` for floating (and complex), ``"i"`` for integer, ``"b"`` for bool, else the kind."""
    kind = np.dtype(dtype).kind
    if kind in "fc":
        return "f"
    if kind in "iu":
        return "i"
    return kind


def numeric_metrics(metrics: Mapping[str, Any] | None) -> dict[str, int | float]:
    """The int/float entries of ``metrics`` (bools become ints; everything else is dropped)."""
    out: dict[str, int | float] = {}
    for k, v in (metrics or {}).items():
        if isinstance(v, (bool, np.bool_, int, np.integer)):
            out[k] = int(v)
        elif isinstance(v, (float, np.floating)):
            out[k] = float(v)
    return out
