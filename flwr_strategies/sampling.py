"""Reproducible client sampling for Flower's legacy server.

Flower's ``SimpleClientManager.sample`` draws with the global ``random`` module over client ids,
and simulated node ids are random each run, so the same seed does not pick the same data twice.
:class:`PartitionClientManager` instead waits for every expected client, orders them by the
partition id they hold and draws with its own seeded NumPy generator.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion

from .common import resolve_partitions


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
        self.ready_at: float | None = None  # perf_counter() when all clients were first connected

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
        if self.ready_at is None:
            self.ready_at = time.perf_counter()
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
