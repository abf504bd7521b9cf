"""DFedCata, DFedAvg and D-PSGD as Message-API strategies (run by Flower's ``start()``).

Usable exactly like Flower's ``flwr.serverapp.strategy.FedAvg``; the number of peers is learned in
round 1 from the nodes::

    strategy = DFedCata(beta=0.99, lam=0.05, topology="random")
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=500)

Arguments: Flower's Message-API ``FedAvg`` arguments (``fraction_train`` must stay 1.0: every peer
trains every round) and the hyperparameters of the legacy class of the same name (:mod:`.strategy`).
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from . import strategy as legacy

__all__ = ["DFedCata", "DFedAvg", "DPSGD"]


class DFedCata(MessageStrategy, like=legacy.DFedCata):
    """DFedCata (arXiv:2410.07272) on the Message API; hyperparameters as :class:`flwr_strategies.DFedCata`.
    With ``sequential_inplace``, ``num_rounds`` counts turns (peers x algorithm rounds)."""


class DFedAvg(MessageStrategy, like=legacy.DFedAvg):
    """DFedAvg (also the server of DFedAvgM and DFedSAM) on the Message API; as :class:`flwr_strategies.DFedAvg`."""


class DPSGD(MessageStrategy, like=legacy.DPSGD):
    """D-PSGD (Lian et al., NeurIPS 2017) on the Message API; as :class:`flwr_strategies.DPSGD`."""
