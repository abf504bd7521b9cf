"""Small helpers shared by every strategy: array layouts, payload byte counts, client identity.

Everything here is framework-neutral except :func:`resolve_partitions`, which talks to a Flower
``ClientManager`` to learn which connected client holds which data partition (Flower is imported
there only, so the framework-neutral core can use this module).
"""

from __future__ import annotations

import concurrent.futures
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from flwr.common import Parameters
    from flwr.server.client_manager import ClientManager
    from flwr.server.client_proxy import ClientProxy

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


def payload_bytes(parameters: Parameters | None) -> int:
    """Bytes of array data carried by ``parameters``, not counting the ``.npy`` headers.

    For a model sent as float32 arrays this equals ``sum(a.nbytes for a in arrays)`` exactly, so
    byte counts can be checked against ``num_params * 4``. The per-tensor header (about 128 bytes
    of dtype/shape text) is excluded on purpose: it does not scale with the model.
    """
    if parameters is None:
        return 0
    return sum(len(t) - _npy_header_length(t) for t in parameters.tensors)


def scalar_dict_bytes(values: dict[str, Any] | None) -> int:
    """Bytes of ``bytes``-valued entries of a Flower config or metrics dict.

    Methods that ship packed arrays or seeds through config/metrics are charged for them.
    Numeric scalars (learning rates, round numbers) are not counted.
    """
    if not values:
        return 0
    return sum(len(v) for v in values.values() if isinstance(v, (bytes, bytearray)))


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


class PartitionIdMissing(RuntimeError):
    """A connected client does not report its ``partition-id`` property."""


def _query_partition(proxy: ClientProxy, timeout: float | None) -> int:
    from flwr.common import Code, GetPropertiesIns

    res = proxy.get_properties(GetPropertiesIns(config={}), timeout=timeout, group_id=None)
    if res.status.code != Code.OK or PARTITION_KEY not in res.properties:
        raise PartitionIdMissing(
            f"client {proxy.cid} did not report its '{PARTITION_KEY}' property "
            f"(status {res.status.code}: {res.status.message})"
        )
    return int(res.properties[PARTITION_KEY])


def resolve_partitions(client_manager: ClientManager, timeout: float | None = None) -> dict[int, ClientProxy]:
    """All connected clients keyed by the partition id they hold.

    The partition id is asked from each client once (``get_properties``), concurrently, and cached
    on the client manager. When ``client_manager`` is a
    :class:`flwr_strategies.sampling.PartitionClientManager`, this first waits until all expected
    partitions are connected. Two clients claiming the same partition is an error.
    """
    expected = getattr(client_manager, "num_partitions", None)
    if expected:
        client_manager.wait_for(expected, timeout=int(timeout or 86400))
    cache: dict[str, int] = client_manager.__dict__.setdefault("_partition_cache", {})
    proxies = client_manager.all()
    unknown = [p for cid, p in proxies.items() if cid not in cache]
    if unknown:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(unknown))) as pool:
            for proxy, pid in zip(unknown, pool.map(lambda p: _query_partition(p, timeout), unknown)):
                cache[proxy.cid] = pid
    by_partition: dict[int, ClientProxy] = {}
    for cid, proxy in proxies.items():
        pid = cache[cid]
        if pid in by_partition:
            raise RuntimeError(f"two clients ({by_partition[pid].cid}, {cid}) claim partition {pid}")
        by_partition[pid] = proxy
    return dict(sorted(by_partition.items()))
