"""DFedCata, DFedAvg and D-PSGD as legacy Flower strategies (``flwr.server.strategy``).

Paper: Q. Li, M. Zhang, Y. Liu, Q. Yin, L. Shen, X. Cao, "Boosting the Performance of Decentralized
Federated Learning via Catalyst Acceleration", arXiv:2410.07272.

The server emulates the peers' network (:class:`~flwr_strategies.decentralized.server.DecentralizedCore`):
every connected client is a peer and trains every round, so ``fraction_fit`` must stay 1.0. Each
class takes Flower's legacy ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.LegacyStrategy`),
the peer-graph settings (the fields of :class:`~flwr_strategies.decentralized.config.GraphConfig`)
and, for DFedCata, the fields of :class:`~flwr_strategies.dfedcata.config.DFedCataConfig`.
DFedAvgM and DFedSAM use :class:`DFedAvg` on the server (their difference is the peers' local rule).
The peers' own models stay on the server: a wrapper that changes the global model (the network
average) is refused with an error.
"""

from __future__ import annotations

import numpy as np

from ..adapters import LegacyStrategy
from ..core.declare import sourced
from ..decentralized.config import GraphConfig
from .config import DFedCataConfig
from .server import DFedAvgServer, DFedCataServer, DPSGDServer

__all__ = ["DFedCata", "DFedAvg", "DPSGD", "GRAPH"]

#: The peer-graph settings of the strategies: GraphConfig's, with the peers' own models scored only
#: on request (``client_eval_every=0``: it costs one test-set pass per peer).
GRAPH = sourced(GraphConfig(client_eval_every=0), client_eval_every=(
    "project: a peer's own model is scored only on request (each scoring is one test-set pass per peer)"))


class DFedCata(LegacyStrategy):
    """DFedCata: decentralized FL with Catalyst acceleration (arXiv:2410.07272, Algorithm 1).

    Every peer starts its round from the Nesterov-extrapolated point of its model and minimises the
    Moreau envelope ``f_i(x) + lam/2 ||x - x_0||^2`` around it; the peers then gossip. The
    hyperparameters are the fields of :class:`~flwr_strategies.dfedcata.config.DFedCataConfig` and
    of the peer graph's :class:`~flwr_strategies.decentralized.config.GraphConfig`.

    Parameters
    ----------
    dtype : numpy dtype (default: float32)
        dtype of the server's model tables.
    """

    core_cls = DFedCataServer
    hyperparameters = {"config": DFedCataConfig, "graph": GRAPH}
    arguments = {"dtype": np.float32}


class DFedAvg(LegacyStrategy):
    """DFedAvg (Sun, Li, Wang, "Decentralized Federated Averaging", IEEE TPAMI 2022): local steps
    from the mixed model, then gossip. Also the server of DFedAvgM (heavy-ball local SGD) and
    DFedSAM (SAM local steps). Parameters: the peer graph and ``dtype``, as :class:`DFedCata`."""

    core_cls = DFedAvgServer
    hyperparameters = {"graph": GRAPH}
    arguments = {"dtype": np.float32}


class DPSGD(LegacyStrategy):
    """D-PSGD (Lian et al., NeurIPS 2017): ``x_i <- sum_j w_ij x_j - lr g_i(x_i)`` with one local
    SGD step per round. Parameters: the peer graph and ``dtype``, as :class:`DFedCata`."""

    core_cls = DPSGDServer
    hyperparameters = {"graph": GRAPH}
    arguments = {"dtype": np.float32}
