"""The config and metric keys shared by strategies and clients: the partition id and the client state."""

from __future__ import annotations

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
