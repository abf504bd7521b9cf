"""Write and read a core's ``state_dict()`` without pickle: arrays in an ``.npz``, the rest as JSON.

Nested dicts are flattened to ``/``-separated keys. Lists of arrays are stored element by element.
:func:`save_state` writes to a temporary file beside the target and renames it, so an interrupted
write never leaves a truncated checkpoint; :func:`load_state` names the file in every error.

:func:`state_layout` / :func:`check_state_layout` compare a loaded state with a core's own (what
:meth:`~flwr_strategies.core.server.ServerCore.load_state_dict` checks before it changes anything).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .validation import all_finite

__all__ = ["atomic_write", "save_state", "load_state", "state_layout", "check_state_layout"]

_META = "__meta__"


def _split(value: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"__array__": key}
    if isinstance(value, dict):
        return {"__dict__": {str(k): _split(v, f"{prefix}/{k}", arrays) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"__list__": [_split(v, f"{prefix}/{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return {"__bytes__": value.hex()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot checkpoint {prefix or 'state'} of type {type(value).__name__}")


def _join(value: Any, arrays: Any) -> Any:
    if isinstance(value, dict):
        if "__array__" in value:
            return np.array(arrays[value["__array__"]])
        if "__dict__" in value:
            return {k: _join(v, arrays) for k, v in value["__dict__"].items()}
        if "__list__" in value:
            return [_join(v, arrays) for v in value["__list__"]]
        if "__bytes__" in value:
            return bytes.fromhex(value["__bytes__"])
    return value


def atomic_write(path: str | Path, write: Callable[[BinaryIO], Any]) -> Path:
    """Create ``path`` (and its folders) with ``write(fh)`` atomically: ``write`` fills a temporary
    file beside ``path`` (flushed to disk) that then replaces ``path``, so a full disk or a crash
    leaves the previous file (or none), never a truncated one. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (a ``state_dict()``) to ``path`` (``.npz``) atomically; returns the path."""
    arrays: dict[str, np.ndarray] = {}
    meta = _split(state, "", arrays)
    return atomic_write(path, lambda fh: np.savez(fh, **arrays, **{_META: np.array(json.dumps(meta))}))


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a state written by :func:`save_state`.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the path for a file
    that is not a complete checkpoint (empty, truncated, another format).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist (or is not a file)")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files") or _META not in data.files:
                raise ValueError(f"no {_META} entry")
            meta = json.loads(str(data[_META]))
            return _join(meta, {k: data[k] for k in data.files if k != _META})
    except (ValueError, EOFError, OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a readable flwr-strategies checkpoint "
                         f"({type(err).__name__}: {err or 'empty or truncated file'})") from None


# -- comparing a loaded state with a core's own --------------------------------------------------
@dataclass(frozen=True)
class _Array:
    shape: tuple[int, ...]
    dtype: np.dtype


def state_layout(value: Any) -> Any:
    """The layout of a state: arrays become their shape and dtype, scalars their type; dicts and
    lists keep their structure."""
    if isinstance(value, np.ndarray):
        return _Array(tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return {str(k): state_layout(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [state_layout(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool
    if isinstance(value, (int, np.integer)):
        return int
    if isinstance(value, (float, np.floating)):
        return float
    return type(value)


def check_state_layout(value: Any, layout: Any, where: str = "state") -> None:
    """Raise ``ValueError`` naming the entry when ``value`` does not have ``layout``
    (:func:`state_layout` of the core's own state) or holds a NaN or an infinity.

    Dicts: every key of ``layout`` is present (keys a core adds later in a run may be too).
    Lists: the same length, except lists that are empty in ``layout`` or hold records (dicts),
    which grow during a run. Arrays: the same dtype exactly, and the same shape (an empty array in
    ``layout`` fixes only the number of dimensions). Numbers: finite, of the same kind.
    """
    if isinstance(layout, dict):
        if not isinstance(value, dict):
            raise ValueError(f"checkpoint {where} is a {type(value).__name__}, expected a dict")
        missing = [k for k in layout if k not in value]
        if missing:
            raise ValueError(f"checkpoint {where} lacks {', '.join(repr(k) for k in missing)}")
        for k, v in value.items():
            if k in layout:
                check_state_layout(v, layout[k], f"{where}/{k}")
            else:
                _check_finite_anywhere(v, f"{where}/{k}")
        return
    if isinstance(layout, list):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"checkpoint {where} is a {type(value).__name__}, expected a list")
        grows = not layout or any(isinstance(e, dict) for e in layout)
        if not grows and len(value) != len(layout):
            raise ValueError(f"checkpoint {where} has {len(value)} entries, expected {len(layout)}")
        for i, v in enumerate(value):
            if i < len(layout) and not grows:
                check_state_layout(v, layout[i], f"{where}[{i}]")
            elif layout and isinstance(layout[0], dict) and isinstance(v, dict):
                check_state_layout(v, layout[0], f"{where}[{i}]")
            else:
                _check_finite_anywhere(v, f"{where}[{i}]")
        return
    if isinstance(layout, _Array):
        if not isinstance(value, np.ndarray):
            raise ValueError(f"checkpoint {where} is a {type(value).__name__}, expected an array")
        if value.dtype != layout.dtype:
            raise ValueError(f"checkpoint {where} has dtype {value.dtype}, expected {layout.dtype}")
        empty = math.prod(layout.shape) == 0
        if (empty and value.ndim != len(layout.shape)) or (not empty and tuple(value.shape) != layout.shape):
            raise ValueError(f"checkpoint {where} has shape {tuple(value.shape)}, expected {layout.shape}")
        if not all_finite(value):
            raise ValueError(f"checkpoint {where} contains NaN or infinite values")
        return
    if layout is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"checkpoint {where} = {value!r:.80} is not a number")
        if not math.isfinite(float(value)):
            raise ValueError(f"checkpoint {where} = {value!r} is not finite")
        return
    if layout is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"checkpoint {where} = {value!r:.80} is not an integer")
        return
    if layout in (bool, str, bytes) and not isinstance(value, layout):
        raise ValueError(f"checkpoint {where} = {value!r:.80} is not a {layout.__name__}")


def _check_finite_anywhere(value: Any, where: str) -> None:
    if isinstance(value, np.ndarray) and not all_finite(value):
        raise ValueError(f"checkpoint {where} contains NaN or infinite values")
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        raise ValueError(f"checkpoint {where} = {value!r} is not finite")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite_anywhere(v, f"{where}/{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite_anywhere(v, f"{where}[{i}]")
