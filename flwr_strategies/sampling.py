"""Reproducible client sampling and client identity for Flower's legacy server.

Flower's ``SimpleClientManager.sample`` draws with the global ``random`` module over client ids,
and simulated node ids are random each run, so the same seed does not pick the same data twice.
:class:`PartitionClientManager` instead waits for every expected client, orders them by the
partition id they hold and draws with its own seeded NumPy generator.
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
from flwr.common import Code, GetPropertiesIns
from flwr.server.client_manager import ClientManager, SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion

from .common import PARTITION_KEY


class PartitionIdMissing(RuntimeError):
    """A connected client does not report its ``partition-id`` property."""


def _query_partition(proxy: ClientProxy, timeout: float | None) -> int:
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


class PartitionClientManager(SimpleClientManager):
    """Client manager that samples clients by partition id with a seeded generator.

    Parameters
    ----------
    num_partitions : int
        Number of clients (data partitions) the federation has. Sampling waits until this many
        clients are connected, which also removes the round-1 under-sampling race of Flower's
        simulation runtime. Must be >= 1.
    seed : int
        Seed of the sampling generator. Same seed, same sequence of sampled partitions on every
        backend. Defaults to 0.
    wait_timeout : int
        Seconds to wait for all clients before failing. Defaults to 600.
    """

    def __init__(self, num_partitions: int, seed: int = 0, wait_timeout: int = 600) -> None:
        super().__init__()
        if int(num_partitions) < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        self.num_partitions = int(num_partitions)
        self.wait_timeout = int(wait_timeout)
        self._rng = np.random.default_rng(seed)
        self._sample_lock = threading.Lock()

    def sample(
        self,
        num_clients: int,
        min_num_clients: int | None = None,
        criterion: Criterion | None = None,
    ) -> list[ClientProxy]:
        """Sample ``num_clients`` distinct clients, returned in ascending partition order."""
        needed = max(self.num_partitions, int(min_num_clients or 0))
        if not self.wait_for(needed, timeout=self.wait_timeout):
            raise TimeoutError(
                f"only {self.num_available()} of {needed} clients connected after {self.wait_timeout}s"
            )
        with self._sample_lock:
            by_partition = resolve_partitions(self)
            candidates = [
                (pid, proxy)
                for pid, proxy in by_partition.items()
                if criterion is None or criterion.select(proxy)
            ]
            if num_clients > len(candidates):
                raise ValueError(
                    f"cannot sample {num_clients} clients: only {len(candidates)} are available"
                )
            chosen = np.sort(self._rng.choice(len(candidates), size=num_clients, replace=False))
            return [candidates[i][1] for i in chosen]
