"""Drop-in Flower strategies for DFedCata, FedLi, DO-ADP, FedMeZO and FedMUD.

``from flwr_strategies import DFedCata`` (and the other names in ``__all__``) imports lazily, so
importing the package itself stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DFedCata": "flwr_strategies.dfedcata.strategy",
    "DFedAvg": "flwr_strategies.dfedcata.strategy",
    "DPSGD": "flwr_strategies.dfedcata.strategy",
    "DecentralizedStrategy": "flwr_strategies.decentralized.strategy",
    "FedLiLS": "flwr_strategies.fedli.strategy_ls",
    "FedLiLU": "flwr_strategies.fedli.strategy_lu",
    "FedExP": "flwr_strategies.fedli.strategy_fedexp",
    "Scaffold": "flwr_strategies.fedli.strategy_scaffold",
    "DOADPStrategy": "flwr_strategies.doadp.strategy",
    "FedMeZO": "flwr_strategies.fedmezo.strategy",
    "FedMUDStrategy": "flwr_strategies.fedmud.strategy",
    "PartitionClientManager": "flwr_strategies.sampling",
    "MeteredStrategy": "flwr_strategies.metering",
    "MethodSpec": "flwr_strategies.registry",
    "get_method": "flwr_strategies.registry",
    "list_methods": "flwr_strategies.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'flwr_strategies' has no attribute '{name}'")
