"""The ``.npy`` payloads of Flower's messages, read and written without extra copies.

Flower carries every array as the bytes of an ``.npy`` file: ``Parameters.tensors`` in the legacy
API, ``Array.data`` in the Message API. Flower's own decoders (``parameters_to_ndarrays``,
``Array.numpy``) copy each payload into a fresh array through ``np.load``; its encoders
(``ndarrays_to_parameters``, ``Array(ndarray)``) go through ``np.save`` into a ``BytesIO``.

:func:`npy_view` reads the header and returns a read-only view of the payload's data instead: no
copy, no new memory, the shape and dtype known before any data is read. The view keeps the
payload alive and cannot be written to, so a core that tried to change a reply in place would
fail loudly rather than change the message. :func:`npy_bytes` writes exactly the bytes ``np.save``
writes, with one copy of the data. Anything the fast paths do not cover (a version 3.0 header, an
object or user-defined dtype) goes through NumPy's own ``np.load`` / ``np.save``, as Flower's does.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np
from numpy.lib import format as npy

__all__ = ["npy_view", "npy_bytes", "payload_bytes", "NUMPY_STYPE"]

#: ``Array.stype`` of an ``.npy`` payload (Flower's ``SType.NUMPY``)
NUMPY_STYPE = "numpy.ndarray"

_MAGIC = npy.MAGIC_PREFIX  # b"\x93NUMPY"
#: header length field per major version: (struct format, its size)
_LENGTH_FIELD = {1: ("<H", 2), 2: ("<I", 4)}
#: parsed headers by their bytes: the replies of a round share a handful of headers
_HEADERS: dict[bytes, tuple[tuple[int, ...], bool, np.dtype, int]] = {}
_HEADERS_MAX = 1024


def _header(blob: Any) -> tuple[tuple[int, ...], bool, np.dtype, int] | None:
    """``(shape, fortran_order, dtype, data_offset)`` of an ``.npy`` payload (``bytes`` or a byte
    ``memoryview``; None: not a version 1.0/2.0 header, left to ``np.load``); raises ``ValueError``
    for a malformed one."""
    if bytes(blob[:6]) != _MAGIC:
        raise ValueError("not an .npy payload (no NUMPY magic string)")
    if len(blob) < 10:
        raise ValueError("truncated .npy header")
    major = blob[6]
    field = _LENGTH_FIELD.get(major)
    if field is None or blob[7] != 0:
        return None
    fmt, size = field
    if len(blob) < 8 + size:
        raise ValueError("truncated .npy header")
    offset = 8 + size + struct.unpack_from(fmt, blob, 8)[0]
    if len(blob) < offset:
        raise ValueError("truncated .npy header")
    key = bytes(blob[:offset])
    parsed = _HEADERS.get(key)
    if parsed is None:
        fp = io.BytesIO(key)
        version = npy.read_magic(fp)
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = reader(fp)
        if len(_HEADERS) >= _HEADERS_MAX:
            _HEADERS.clear()
        parsed = _HEADERS[key] = (tuple(int(s) for s in shape), bool(fortran), dtype, offset)
    return parsed


def _plain(dtype: np.dtype) -> bool:
    """A bool, integer, floating or complex dtype (no fields, objects or sub-arrays): the fast paths'."""
    return dtype.kind in "biufc" and dtype.fields is None and dtype.subdtype is None and dtype.itemsize > 0


def npy_view(payload: Any) -> np.ndarray:
    """The array in an ``.npy`` payload (``bytes`` or any buffer) as a read-only view of it.

    Gives the array ``np.load(BytesIO(payload), allow_pickle=False)`` gives (shape, dtype, byte
    order, Fortran order and values), without copying the data. Object dtypes are refused, as
    ``np.load`` refuses them without pickle. Raises ``ValueError`` for a payload that is not an
    ``.npy`` file or is shorter than its header says.
    """
    blob = payload
    if not isinstance(blob, bytes):  # bytes index and slice as bytes; other buffers through a byte view
        blob = memoryview(payload)
        if blob.ndim != 1 or blob.itemsize != 1:
            blob = blob.cast("B")
    parsed = _header(blob)
    if parsed is None or not _plain(parsed[2]):
        # another header version, objects (refused), records, strings: NumPy's own (copying) reader
        out = np.load(io.BytesIO(bytes(blob)), allow_pickle=False)
        if not isinstance(out, np.ndarray):
            raise ValueError(f"the .npy payload holds a {type(out).__name__}, not an array")
        out.flags.writeable = False
        return out
    shape, fortran, dtype, offset = parsed
    count = 1
    for s in shape:
        count *= s
    need = count * dtype.itemsize
    if len(blob) - offset < need:
        raise ValueError(f"the .npy payload holds {len(blob) - offset} bytes of data, its header needs {need}")
    if count == 0:
        out = np.empty(shape, dtype, order="F" if fortran else "C")
    else:  # one small array object over the payload: nothing of the data's size is allocated
        out = np.ndarray(shape, dtype, buffer=blob, offset=offset, order="F" if fortran else "C")
    out.flags.writeable = False
    return out


def npy_bytes(array: np.ndarray) -> bytes:
    """The ``.npy`` bytes of ``array``, exactly those ``np.save(fp, array, allow_pickle=False)``
    writes (what Flower's ``ndarray_to_bytes`` and ``Array(ndarray)`` carry), built with a single
    copy of the data."""
    a = np.asanyarray(array)
    fp = io.BytesIO()
    d = npy.header_data_from_array_1_0(a) if _plain(a.dtype) else None
    try:
        if d is None:
            raise ValueError("not a plain numeric dtype")
        npy.write_array_header_1_0(fp, d)
    except ValueError:  # objects (refused), records, strings, a header too long for version 1.0
        fp = io.BytesIO()
        np.save(fp, a, allow_pickle=False)
        return fp.getvalue()
    data = a.T if d["fortran_order"] else np.ascontiguousarray(a)
    if data.size == 0:
        return fp.getvalue()
    return fp.getvalue() + data.reshape(-1).view(np.uint8).data


def payload_bytes(parameters: Any) -> int:
    """Bytes of array data carried by ``parameters`` (Flower's ``Parameters``), not counting the
    ``.npy`` headers: ``sum(a.nbytes for a in arrays)`` exactly, so byte counts can be checked against
    ``num_params * 4`` for float32 arrays. The header (about 128 bytes of dtype and shape text per
    array) is left out on purpose: it does not scale with the model."""
    return 0 if parameters is None else sum(npy_view(t).nbytes for t in parameters.tensors)
