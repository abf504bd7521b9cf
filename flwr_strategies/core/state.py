"""Write and read a core's ``state_dict()`` without pickle: arrays in an ``.npz``, the rest as JSON.

Nested dicts are flattened to ``/``-separated keys. Lists of arrays are stored element by element.
:func:`save_state` writes to a temporary file beside the target and renames it, so an interrupted
write never leaves a truncated checkpoint; :func:`load_state` checks what the file declares against
what it holds before allocating (a crafted file cannot make it allocate more than its own size) and
names the file in every error.

:func:`state_layout` / :func:`check_state_layout` compare a loaded state with a core's own (what
:meth:`~flwr_strategies.core.server.ServerCore.load_state_dict` checks before it changes anything).
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .validation import all_finite, is_int, is_real

__all__ = ["MAX_META_DEPTH", "MAX_STATE_BYTES", "atomic_write", "check_state_layout", "load_state", "save_state",
           "state_layout"]

_META = "__meta__"
#: The most bytes :func:`load_state` lets a checkpoint's arrays declare, unless told otherwise (16 GiB).
MAX_STATE_BYTES = 16 * 2**30
#: The deepest nesting of a checkpoint's JSON metadata :func:`load_state` reads. A state nested
#: ``k`` dicts/lists deep takes about ``2 k`` levels; the cores' states take at most 12 (FedMeZO's).
MAX_META_DEPTH = 64
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


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


def _join(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]  # read once from its own entry: no copy
        if "__dict__" in value:
            return {k: _join(v, arrays) for k, v in value["__dict__"].items()}
        if "__list__" in value:
            return [_join(v, arrays) for v in value["__list__"]]
        if "__bytes__" in value:
            return bytes.fromhex(value["__bytes__"])
    return value


def _references(meta: Any) -> list[str]:
    """The array entries the metadata refers to, in the order :func:`_join` reads them."""
    out: list[str] = []
    stack = [meta]
    while stack:
        v = stack.pop()
        if not isinstance(v, dict):
            continue
        if "__array__" in v:
            if not isinstance(v["__array__"], str):
                raise ValueError(f"the metadata refers to an array by {v['__array__']!r:.80}, not by name")
            out.append(v["__array__"])
        elif isinstance(v.get("__dict__"), dict):
            stack.extend(v["__dict__"].values())
        elif isinstance(v.get("__list__"), list):
            stack.extend(v["__list__"])
    return out


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
    """Write ``state`` (a ``state_dict()``) to ``path`` (``.npz``) atomically; returns the path.
    A state :func:`load_state` would refuse for its depth raises ``ValueError`` instead."""
    arrays: dict[str, np.ndarray] = {}
    text = json.dumps(_split(state, "", arrays))
    _check_depth(text, f"state for {path}")
    return atomic_write(path, lambda fh: np.savez(fh, **arrays, **{_META: np.array(text)}))


def load_state(path: str | Path, *, max_bytes: int = MAX_STATE_BYTES) -> dict[str, Any]:
    """Read a state written by :func:`save_state`, allocating no more than the file declares and holds.

    Before any array is read, the zip directory and every entry's ``.npy`` header are checked: each
    entry must be a stored (uncompressed) ``.npy`` array whose declared shape and dtype fill exactly
    the bytes the entry holds (so a 4 MiB file cannot make this allocate 4 GiB, nor a header declaring
    2**40 values raise ``MemoryError``); the declared sizes together stay within the file's size and
    ``max_bytes``; the JSON metadata nests at most :data:`MAX_META_DEPTH` levels; and every array
    entry is referred to exactly once by the metadata. The arrays are then read once each, without
    copies, so loading takes about the file's size in memory.

    Parameters
    ----------
    path : str | Path
        The checkpoint file (``.npz``).
    max_bytes : int (default: :data:`MAX_STATE_BYTES`, 16 GiB)
        The most bytes the arrays may declare in all; a positive integer.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Naming the path: the file is not a complete checkpoint (empty, truncated, another format)
        or declares more than it holds or than ``max_bytes``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist (or is not a file)")
    try:
        return _read_state(path, int(max_bytes))
    except (ValueError, EOFError, OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeError) as err:
        raise ValueError(f"{path} is not a readable flwr-strategies checkpoint "
                         f"({type(err).__name__}: {err or 'empty or truncated file'})") from None


def _read_state(path: Path, max_bytes: int) -> dict[str, Any]:
    size = path.stat().st_size
    with zipfile.ZipFile(path) as zf:
        infos = {info.filename: info for info in zf.infolist()}
        if len(infos) != len(zf.infolist()):
            raise ValueError("an entry appears twice in the zip directory")
        if f"{_META}.npy" not in infos:
            raise ValueError(f"no {_META} entry")
        if sum(info.compress_size for info in infos.values()) > size:
            raise ValueError(f"its zip directory declares more bytes than the file's {size}")
        declared = 0
        for name, info in infos.items():
            declared += _check_entry(zf, info, size)
        if declared > max_bytes:
            raise ValueError(f"its arrays declare {declared} bytes in all, more than the limit of {max_bytes} "
                             "(load_state's max_bytes)")
        text = str(_read_entry(zf, infos[f"{_META}.npy"])[()])
        _check_depth(text)
        meta = json.loads(text)
        del text
        refs = _references(meta)
        keys = {name[: -len(".npy")] for name in infos} - {_META}
        unknown = sorted(set(refs) - keys)
        if unknown:
            raise ValueError(f"the metadata refers to array entries the file lacks: {unknown[:5]}")
        twice = sorted({r for r in refs if refs.count(r) > 1}) if len(set(refs)) != len(refs) else []
        if twice:
            raise ValueError(f"the metadata refers to the array entries {twice[:5]} more than once")
        unused = sorted(keys - set(refs))
        if unused:
            raise ValueError(f"the file holds array entries the metadata never refers to: {unused[:5]}")
        arrays = {k: _read_entry(zf, infos[f"{k}.npy"]) for k in refs}
        return _join(meta, arrays)


def _check_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> int:
    """Check one entry's zip record and ``.npy`` header against what it holds; its data bytes."""
    name = info.filename
    if not name.endswith(".npy"):
        raise ValueError(f"entry {name!r} is not an .npy array")
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        raise ValueError(f"entry {name!r} is compressed (save_state stores entries uncompressed)")
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"entry {name!r} has .npy format version {version}, not 1.0 or 2.0")
        header = fh.tell()
    if dtype.hasobject:
        raise ValueError(f"entry {name!r} holds Python objects (dtype {dtype}), which a checkpoint never does")
    nbytes = math.prod(shape) * dtype.itemsize
    if header + nbytes != info.file_size:
        raise ValueError(f"entry {name!r} declares shape {tuple(shape)} of {dtype} ({nbytes} bytes) but holds "
                         f"{info.file_size - header} bytes of data (the file is {size} bytes)")
    return nbytes


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    with zf.open(info) as fh:
        return np.lib.format.read_array(fh, allow_pickle=False)


def _check_depth(text: str, what: str = "its metadata") -> None:
    """Raise ``ValueError`` when the JSON ``text`` nests deeper than :data:`MAX_META_DEPTH`."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        depth += 1 if token in "[{" else -1
        if depth > MAX_META_DEPTH:
            raise ValueError(f"{what} nests deeper than {MAX_META_DEPTH} levels")


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
    ``layout`` fixes only the number of dimensions). Numbers: finite, of the same kind. Integers
    (and integer arrays) are not negative: every integer a core keeps is a count (DO-ADP's
    ``active_steps``, which the observed epsilon is computed from), a round, an index or a seed.
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
        _check_finite_anywhere(value, where)  # finite, and an integer array holds no negative count
        return
    if layout is float:
        if not is_real(value):
            raise ValueError(f"checkpoint {where} = {value!r:.80} is not a number")
        if not math.isfinite(float(value)):
            raise ValueError(f"checkpoint {where} = {value!r} is not finite")
        return
    if layout is int:
        if not is_int(value):
            raise ValueError(f"checkpoint {where} = {value!r:.80} is not an integer")
        _check_not_negative(value, where)
        return
    if layout in (bool, str, bytes) and not isinstance(value, layout):
        raise ValueError(f"checkpoint {where} = {value!r:.80} is not a {layout.__name__}")


def _check_not_negative(value: Any, where: str) -> None:
    """Raise ``ValueError`` for a negative integer or an integer array holding one (a count)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "i" and value.size and int(value.min()) < 0:
            at = tuple(int(i) for i in np.unravel_index(int(np.argmin(value)), value.shape))
            raise ValueError(f"checkpoint {where} holds {int(value.min())} at {at}: a count cannot be negative")
    elif is_int(value) and value < 0:
        raise ValueError(f"checkpoint {where} = {int(value)}: a count cannot be negative")


def _check_finite_anywhere(value: Any, where: str) -> None:
    _check_not_negative(value, where)
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
