"""Drop-in Flower strategies for DFedCata, FedLi, DO-ADP, FedMeZO and FedMUD.

``from flwr_strategies import DFedCata`` gives the legacy-API strategy (``flwr.server.strategy``);
``from flwr_strategies.serverapp import DFedCata`` the Message-API one (``flwr.serverapp.strategy``).
Client pieces live in ``flwr_strategies.clients``. ``NoProgressError`` is what a strategy raises
when no client update was aggregated in two consecutive rounds. Names import lazily, so importing
the package itself stays cheap.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, Iterable[str]]) -> tuple[Callable[[str], Any], dict[str, str]]:
    """A package's lazy exports: ``modules`` maps a module (relative to ``package`` when it starts
    with ".") to the names it exports. Returns the package's module ``__getattr__``, which imports a
    name's module on first use (so importing the package stays cheap), and ``{name: module}`` with
    absolute module names (``__all__`` is its sorted keys)."""
    exports = {name: importlib.util.resolve_name(module, package) for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__, exports


__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".baselines.strategy": ("FedAvg", "FedProx", "FedAdam", "FedSAM"),
    ".adapters.legacy": ("LegacyStrategy",),
    ".adapters.recorder": ("NoProgressError",),
    ".core.state": ("save_state", "load_state"),
    ".dfedcata.strategy": ("DFedCata", "DFedAvg", "DPSGD"),
    ".fedli.strategy": ("FedLiLS", "FedLiLU", "FedExP", "Scaffold"),
    ".doadp.strategy": ("DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT"),
    ".fedmezo.strategy": ("FedMeZO", "LoRAFedAvg"),
    ".fedmud.strategy": ("FedMUD", "FedLMT", "FedPara", "FedHM"),
    ".sampling": ("PartitionClientManager",),
    ".registry": ("MethodSpec", "get_method", "list_methods"),
})
__all__ = sorted(_EXPORTS)
