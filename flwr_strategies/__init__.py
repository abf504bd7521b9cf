"""Drop-in Flower strategies for DFedCata, FedLi, DO-ADP, FedMeZO and FedMUD.

``from flwr_strategies import DFedCata`` gives the legacy-API strategy (``flwr.server.strategy``);
``from flwr_strategies.serverapp import DFedCata`` the Message-API one (``flwr.serverapp.strategy``).
Client pieces live in ``flwr_strategies.clients``. ``NoProgressError`` is what a strategy raises
when no client update was aggregated in two consecutive rounds. Names import lazily, so importing
the package itself stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FedAvg": "flwr_strategies.baselines.strategy",
    "FedProx": "flwr_strategies.baselines.strategy",
    "FedAdam": "flwr_strategies.baselines.strategy",
    "FedSAM": "flwr_strategies.baselines.strategy",
    "LegacyStrategy": "flwr_strategies.adapters.legacy",
    "NoProgressError": "flwr_strategies.adapters.recorder",
    "save_state": "flwr_strategies.core.state",
    "load_state": "flwr_strategies.core.state",
    "DFedCata": "flwr_strategies.dfedcata.strategy",
    "DFedAvg": "flwr_strategies.dfedcata.strategy",
    "DPSGD": "flwr_strategies.dfedcata.strategy",
    "FedLiLS": "flwr_strategies.fedli.strategy",
    "FedLiLU": "flwr_strategies.fedli.strategy",
    "FedExP": "flwr_strategies.fedli.strategy",
    "Scaffold": "flwr_strategies.fedli.strategy",
    "DOADP": "flwr_strategies.doadp.strategy",
    "DMSGD": "flwr_strategies.doadp.strategy",
    "DPDO": "flwr_strategies.doadp.strategy",
    "DPDDA": "flwr_strategies.doadp.strategy",
    "CPGT": "flwr_strategies.doadp.strategy",
    "FedMeZO": "flwr_strategies.fedmezo.strategy",
    "LoRAFedAvg": "flwr_strategies.fedmezo.strategy",
    "FedMUD": "flwr_strategies.fedmud.strategy",
    "FedLMT": "flwr_strategies.fedmud.strategy",
    "FedPara": "flwr_strategies.fedmud.strategy",
    "FedHM": "flwr_strategies.fedmud.strategy",
    "PartitionClientManager": "flwr_strategies.sampling",
    "MethodSpec": "flwr_strategies.registry",
    "get_method": "flwr_strategies.registry",
    "list_methods": "flwr_strategies.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'flwr_strategies' has no attribute '{name}'")
