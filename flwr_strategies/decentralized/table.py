"""One contiguous ``(m, d)`` table of client models.

:class:`ModelLayout` remembers the shapes and dtypes of a list of arrays (a model in
``clients.training.get_weights`` order) so a model can be flattened into one row of the
table and a row turned back into the list. Every floating-point array is treated like a
parameter (mixed and extrapolated); integer buffers are stored as floats and cast back
(their mixed value is rounded), which is harmless for the models used here (no BatchNorm).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ModelLayout", "ModelTable"]


@dataclass(frozen=True)
class ModelLayout:
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]

    @classmethod
    def of(cls, arrays: list[np.ndarray]) -> "ModelLayout":
        return cls(tuple(tuple(a.shape) for a in arrays), tuple(np.asarray(a).dtype for a in arrays))

    @property
    def sizes(self) -> list[int]:
        return [int(np.prod(s)) if s else 1 for s in self.shapes]

    @property
    def size(self) -> int:
        return int(sum(self.sizes))

    def flatten(self, arrays: list[np.ndarray], out: np.ndarray | None = None, dtype=np.float32) -> np.ndarray:
        if len(arrays) != len(self.shapes):
            raise ValueError(f"expected {len(self.shapes)} arrays, got {len(arrays)}")
        vec = np.empty(self.size, dtype=dtype) if out is None else out
        pos = 0
        for a, shape, n in zip(arrays, self.shapes, self.sizes):
            a = np.asarray(a)
            if tuple(a.shape) != shape:
                raise ValueError(f"array shape {a.shape} does not match layout {shape}")
            vec[pos : pos + n] = a.reshape(-1)
            pos += n
        return vec

    def views(self, vec: np.ndarray) -> list[np.ndarray]:
        """The arrays of row ``vec`` without copying where possible: a reshaped view for every array
        whose dtype is ``vec``'s, a converted copy (as :meth:`unflatten`) for the others."""
        out, pos = [], 0
        for shape, dt, n in zip(self.shapes, self.dtypes, self.sizes):
            piece = vec[pos : pos + n].reshape(shape)
            if dt != vec.dtype:
                if np.issubdtype(dt, np.integer):
                    piece = np.rint(piece)
                piece = piece.astype(dt, copy=True)
            out.append(piece)
            pos += n
        return out

    def unflatten(self, vec: np.ndarray) -> list[np.ndarray]:
        out, pos = [], 0
        for shape, dt, n in zip(self.shapes, self.dtypes, self.sizes):
            piece = vec[pos : pos + n].reshape(shape)
            if np.issubdtype(dt, np.integer):
                piece = np.rint(piece)
            out.append(piece.astype(dt, copy=True))
            pos += n
        return out


class ModelTable:
    """``m`` models of one layout stored as one C-contiguous ``(m, d)`` array ``self.data``."""

    def __init__(self, layout: ModelLayout, num_rows: int, dtype=np.float32):
        self.layout = layout
        self.data = np.zeros((int(num_rows), layout.size), dtype=dtype)

    @classmethod
    def replicate(cls, arrays: list[np.ndarray], num_rows: int, dtype=np.float32) -> "ModelTable":
        layout = ModelLayout.of(arrays)
        t = cls(layout, num_rows, dtype)
        t.data[:] = layout.flatten(arrays, dtype=dtype)[None, :]
        return t

    def row_arrays(self, i: int) -> list[np.ndarray]:
        """Row ``i`` as arrays of the layout (a copy)."""
        return self.layout.unflatten(self.data[i])
