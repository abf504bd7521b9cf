"""Every method as a Message-API strategy (``flwr.serverapp.strategy.Strategy`` with ``start()``).

The mirror of Flower's ``flwr.serverapp.strategy``: ``from flwr_strategies.serverapp import
DFedCata`` replaces ``from flwr.serverapp.strategy import FedAvg`` in a Message-API ServerApp. The
legacy-API classes of the same names are exported by ``flwr_strategies`` itself. Names import
lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FedAvg": "flwr_strategies.baselines.serverapp",
    "FedProx": "flwr_strategies.baselines.serverapp",
    "FedAdam": "flwr_strategies.baselines.serverapp",
    "FedSAM": "flwr_strategies.baselines.serverapp",
    "DFedCata": "flwr_strategies.dfedcata.serverapp",
    "DFedAvg": "flwr_strategies.dfedcata.serverapp",
    "DPSGD": "flwr_strategies.dfedcata.serverapp",
    "FedLiLS": "flwr_strategies.fedli.serverapp",
    "FedLiLU": "flwr_strategies.fedli.serverapp",
    "FedExP": "flwr_strategies.fedli.serverapp",
    "Scaffold": "flwr_strategies.fedli.serverapp",
    "FedMUD": "flwr_strategies.fedmud.serverapp",
    "FedLMT": "flwr_strategies.fedmud.serverapp",
    "FedPara": "flwr_strategies.fedmud.serverapp",
    "FedHM": "flwr_strategies.fedmud.serverapp",
    "FedMeZO": "flwr_strategies.fedmezo.serverapp",
    "LoRAFedAvg": "flwr_strategies.fedmezo.serverapp",
    "DOADP": "flwr_strategies.doadp.serverapp",
    "DMSGD": "flwr_strategies.doadp.serverapp",
    "DPDO": "flwr_strategies.doadp.serverapp",
    "DPDDA": "flwr_strategies.doadp.serverapp",
    "CPGT": "flwr_strategies.doadp.serverapp",
    "MessageStrategy": "flwr_strategies.adapters.message",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'flwr_strategies.serverapp' has no attribute '{name}'")
