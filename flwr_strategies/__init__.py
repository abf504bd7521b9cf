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


def lazy_exports(package: str, exports: dict[str, str]) -> Any:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a module, relative to
    ``package`` when it starts with ".") on first use, so importing the package stays cheap."""
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name], package), name)

    return __getattr__


__getattr__ = lazy_exports(__name__, _EXPORTS)
