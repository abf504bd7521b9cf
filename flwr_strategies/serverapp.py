"""Every method as a Message-API strategy (``flwr.serverapp.strategy.Strategy`` with ``start()``).

The mirror of Flower's ``flwr.serverapp.strategy``: ``from flwr_strategies.serverapp import
DFedCata`` replaces ``from flwr.serverapp.strategy import FedAvg`` in a Message-API ServerApp. The
legacy-API classes of the same names are exported by ``flwr_strategies`` itself. Names import
lazily.
"""

from . import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    **{f"flwr_strategies.{folder}.serverapp": names.split() for folder, names in (
        ("baselines", "FedAvg FedProx FedAdam FedSAM"), ("dfedcata", "DFedCata DFedAvg DPSGD"),
        ("fedli", "FedLiLS FedLiLU FedExP Scaffold"), ("fedmud", "FedMUD FedLMT FedPara FedHM"),
        ("fedmezo", "FedMeZO LoRAFedAvg"), ("doadp", "DOADP DMSGD DPDO DPDDA CPGT"))},
    "flwr_strategies.adapters.message": ("MessageStrategy",),
})
__all__ = sorted(_EXPORTS)
