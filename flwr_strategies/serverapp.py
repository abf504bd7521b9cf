"""Every method as a Message-API strategy (``flwr.serverapp.strategy.Strategy`` with ``start()``).

The mirror of Flower's ``flwr.serverapp.strategy``: ``from flwr_strategies.serverapp import
DFedCata`` replaces ``from flwr.serverapp.strategy import FedAvg`` in a Message-API ServerApp. The
legacy-API classes of the same names are exported by ``flwr_strategies`` itself. Names import
lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {name: f"flwr_strategies.{folder}.serverapp" for folder, names in (
    ("baselines", "FedAvg FedProx FedAdam FedSAM"), ("dfedcata", "DFedCata DFedAvg DPSGD"),
    ("fedli", "FedLiLS FedLiLU FedExP Scaffold"), ("fedmud", "FedMUD FedLMT FedPara FedHM"),
    ("fedmezo", "FedMeZO LoRAFedAvg"), ("doadp", "DOADP DMSGD DPDO DPDDA CPGT")) for name in names.split()}
_EXPORTS["MessageStrategy"] = "flwr_strategies.adapters.message"

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'flwr_strategies.serverapp' has no attribute '{name}'")
