"""Write and read a core's ``state_dict()`` without pickle: arrays in an ``.npz``, the rest as JSON.

Nested dicts are flattened to ``/``-separated keys. Lists of arrays are stored element by element.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["save_state", "load_state"]

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


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (a ``state_dict()``) to ``path`` (``.npz``); returns the path written."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    meta = _split(state, "", arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays, **{_META: np.array(json.dumps(meta))})
    return path


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a state written by :func:`save_state`."""
    with np.load(Path(path), allow_pickle=False) as data:
        if _META not in data:
            raise ValueError(f"{path} is not a flwr-strategies checkpoint (no {_META} entry)")
        meta = json.loads(str(data[_META]))
        return _join(meta, {k: data[k] for k in data.files if k != _META})
