"""Small framework-neutral helpers shared by every strategy: array layouts, payload byte counts,
the partition-id key."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The partition id: Flower's node-config key, and the key under which clients report it.
PARTITION_KEY = "partition-id"
#: Train-config key carrying the run's client-state key: a 32-hex-digit token the strategy draws once
#: and its checkpoint carries, under which nodes keep their state across Flower runs
#: (:mod:`flwr_strategies.clients.store`).
CLIENT_STATE_KEY = "client-state-key"
#: Train-config key of a resumed run: the checkpoint's round ``k`` (absent in a run that did not resume).
CLIENT_STATE_RESUMED = "client-state-resumed"
#: Train-config key of a resumed run: 1 when the partition trained at or before round ``k`` (its client
#: may hold state to restore), else 0.
CLIENT_STATE_KEPT = "client-state-kept"


def _npy_header_length(blob: bytes) -> int:
    """Length of the ``.npy`` header of one serialised tensor (0 if it is not ``.npy``)."""
    if len(blob) < 10 or blob[:6] != b"\x93NUMPY":
        return 0
    major = blob[6]
    if major == 1:
        return 10 + struct.unpack("<H", blob[8:10])[0]
    return 12 + struct.unpack("<I", blob[8:12])[0]


def payload_bytes(parameters: Any) -> int:
    """Bytes of array data carried by ``parameters`` (Flower's ``Parameters``), not counting the ``.npy`` headers.

    For a model sent as float32 arrays this equals ``sum(a.nbytes for a in arrays)`` exactly, so
    byte counts can be checked against ``num_params * 4``. The per-tensor header (about 128 bytes
    of dtype/shape text) is excluded on purpose: it does not scale with the model.
    """
    if parameters is None:
        return 0
    return sum(len(t) - _npy_header_length(t) for t in parameters.tensors)


@dataclass(frozen=True)
class ParamLayout:
    """Shapes and dtypes of a list of arrays, to move between list form and one flat vector."""

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]

    @property
    def sizes(self) -> list[int]:
        """Number of elements of each array."""
        return [int(np.prod(s, dtype=np.int64)) for s in self.shapes]

    @property
    def size(self) -> int:
        """Total number of elements."""
        return int(sum(self.sizes))

    def unflatten(self, vec: np.ndarray) -> list[np.ndarray]:
        """Split a flat vector back into arrays of the recorded shapes and dtypes."""
        vec = np.asarray(vec)
        if vec.ndim != 1 or vec.shape[0] != self.size:
            raise ValueError(f"expected a flat vector of {self.size} elements, got shape {vec.shape}")
        out, start = [], 0
        for shape, dtype, n in zip(self.shapes, self.dtypes, self.sizes):
            out.append(vec[start : start + n].reshape(shape).astype(dtype, copy=False))
            start += n
        return out


def layout_of(arrays: list[np.ndarray]) -> ParamLayout:
    """The :class:`ParamLayout` of ``arrays``."""
    return ParamLayout(tuple(tuple(a.shape) for a in arrays), tuple(np.asarray(a).dtype for a in arrays))


def flatten(arrays: list[np.ndarray], dtype: Any = None) -> tuple[np.ndarray, ParamLayout]:
    """Concatenate arrays into one flat vector (``dtype`` defaults to their common type)."""
    layout = layout_of(arrays)
    if not arrays:
        return np.zeros(0, dtype=dtype or np.float32), layout
    vec = np.concatenate([np.asarray(a).ravel() for a in arrays])
    if dtype is not None:
        vec = vec.astype(dtype, copy=False)
    return vec, layout
