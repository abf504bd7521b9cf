"""DO-ADP, D-mSGD, DPDO, DP-DDA and CPGT as legacy Flower strategies (``flwr.server.strategy``).

Every connected client is an agent of the peer network and takes part in every round (so
``fraction_fit`` stays 1.0); the matching clients are :mod:`flwr_strategies.clients.doadp` (DO-ADP,
D-mSGD) and :mod:`flwr_strategies.clients.doadp_baselines`. Example::

    strategy = DOADP(num_rounds=2000, local_dataset_size=3000, lr=0.01, batch_size=32, epsilon=1.0,
                     delta=1e-5, evaluate_fn=evaluate)
"""

from __future__ import annotations

from typing import Any

from ..adapters import REQUIRED, LegacyStrategy
from ..core.declare import sourced
from ..decentralized.config import GraphConfig
from .baseline_server import CPGTServer, DPDDAServer, DPDOServer
from .config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from .server import DMSGDServer, DOADPServer

__all__ = ["DOADP_ARGUMENTS", "Accounted", "DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT", "AGENTS", "GRAPH", "RENAMED", "NO_FEDERATED_EVALUATION"]

#: The arguments every method of this folder takes besides its config's fields (see :class:`DOADP`).
AGENTS = {"num_rounds": REQUIRED, "local_dataset_size": REQUIRED, "lr": 0.01, "batch_size": 32, "lr_decay": 1.0}
#: DO-ADP's arguments: AGENTS, plus Flower's ``accountant`` (a ``flwr.serverapp.PrivacyAccountant``; default
#: None: an :class:`~flwr_strategies.privacy.AmplifiedAccountant` without max_epsilon).
DOADP_ARGUMENTS = {**AGENTS, "accountant": None}
#: The peer graph: GraphConfig's fields, with the paper's circulant graph by default.
GRAPH = sourced(
    GraphConfig(**DOADPServer.graph_defaults),
    topology="paper: Sec. VI (edges (i, i +/- j mod n), j = 1, 2, 3: a circulant graph)",
    neighbours="paper: Sec. VI (j = 1, 2, 3 on both sides: 6 neighbours and the agent itself)",
    weights="project: the paper gives no mixing weights (Sec. VI); auto = 1/(d_max + 1) on the regular circulant "
            "graph, Metropolis-Hastings otherwise, both doubly stochastic",
    client_eval_every="project: the agents' own models are scored only on request (one test pass per agent)",
)
#: Their names in the cores.
RENAMED = {"local_dataset_size": "dataset_size", "lr": "alpha"}
#: Why the private methods refuse federated evaluation.
NO_FEDERATED_EVALUATION = (
    "the clients would evaluate the public model on their training data and report the result outside the "
    "accounted mechanism (the privacy guarantee covers the agents' messages only); evaluate centrally with "
    "evaluate_fn on data that is not training data")


class _Agents(LegacyStrategy):
    arguments = AGENTS
    renamed = RENAMED


class _Private(_Agents):
    federated_evaluation = NO_FEDERATED_EVALUATION

    def __init__(self, *, fraction_evaluate: float = 0.0, **kwargs: Any) -> None:
        super().__init__(fraction_evaluate=fraction_evaluate, **kwargs)


class Accounted:
    """``accountant`` and ``privacy_spent()`` as on Flower's DP wrappers (the core's accountant once the
    first round built it, else the one passed in)."""

    @property
    def accountant(self) -> Any:
        core = getattr(self, "core", None)
        return core.accountant if core is not None else self.method_arguments.get("accountant")

    def privacy_spent(self) -> Any:
        """Cumulative ``PrivacySpent`` (None before the first round with the default accountant)."""
        return None if self.accountant is None else self.accountant.get_privacy_spent()


class DOADP(Accounted, _Private):
    """DO-ADP (Huo, Liu, Ding, Johansson, Shi, "Decentralized Optimization with Amplified Privacy via
    Efficient Communication", arXiv 2506.07102): decentralized momentum SGD with Gaussian DP noise,
    random activation (p) and Top-k messages with error feedback (k/d). The reported epsilon is the
    one a standard accountant certifies (``dp_epsilon`` at ``dp_delta``); the paper's Theorem 1
    bound is reported beside it (``theorem1_epsilon``/``theorem1_delta``).

    ``fraction_evaluate`` defaults to 0.0, not Flower's 1.0, and any other value is refused: the
    clients would score the public model on their training data, outside the accounted mechanism.
    Its hyperparameters are the fields of :class:`~flwr_strategies.doadp.config.DOADPConfig` and of
    the peer graph's :class:`~flwr_strategies.decentralized.config.GraphConfig` (the paper's
    circulant graph by default).

    Parameters
    ----------
    num_rounds : int
        Planned rounds T (one round = one iteration); the noise is calibrated for T rounds.
    local_dataset_size : int
        q, the smallest local dataset of an agent (records), >= batch_size.
    lr : float (default: 0.01, the paper's CNN step size alpha)
        Step size, > 0.
    batch_size : int (default: 32, the project's; the paper uses 1)
        Records per private step, in [1, q].
    lr_decay : float (default: 1.0)
        Per-round step-size decay, in (0, 1].
    accountant : flwr.serverapp.PrivacyAccountant or None (default: None)
        As Flower's DP wrappers: every round that ran is composed into it (one subsampled Gaussian
        release of b of the q records per agent and round; activation and Top-k are recorded, not
        credited), and the run stops with Flower's ``PrivacyBudgetExhausted`` before a round that would
        pass its ``config.max_epsilon``. Its configuration must match what runs (``target_delta=delta``,
        ``population_size=local_dataset_size``, replace-one, ``"without-replacement"`` for
        ``sampling="uniform"``; :func:`~flwr_strategies.privacy.privacy_config_for` builds it). Default:
        an :class:`~flwr_strategies.privacy.AmplifiedAccountant` without ``max_epsilon`` (the target
        epsilon is already checked over ``num_rounds`` at construction), read after a run as
        ``strategy.accountant.get_privacy_spent()``.
    """

    core_cls = DOADPServer
    hyperparameters = {"config": DOADPConfig, "graph": GRAPH}
    arguments = DOADP_ARGUMENTS


class DMSGD(_Agents):
    """Decentralized momentum SGD (eq. (2) of Huo et al.), NOT private: DO-ADP's network with p = 1,
    k = d, no clipping and no noise. Arguments and graph as :class:`DOADP`, hyperparameters the fields of
    :class:`~flwr_strategies.doadp.config.DMSGDConfig`."""

    core_cls = DMSGDServer
    hyperparameters = {"config": DMSGDConfig, "graph": GRAPH}


class DPDO(_Private):
    """DPDO (Huang, Mitra, Vaidya, ICDCN 2015), baseline of DO-ADP: Laplace-perturbed broadcasts
    with geometrically decaying noise and step size; pure epsilon-DP (certified by basic composition
    with amplification by subsampling). Arguments as :class:`DOADP` (``fraction_evaluate`` defaults to
    0.0, not Flower's 1.0: federated evaluation is refused), hyperparameters the fields of
    :class:`~flwr_strategies.doadp.config.DPDOConfig`."""

    core_cls = DPDOServer
    hyperparameters = {"config": DPDOConfig, "graph": GRAPH}


class DPDDA(_Private):
    """DP-DDA (Liu, Johansson, Shi, Automatica 2024), baseline of DO-ADP: differentially private
    distributed dual averaging with node sampling; every node transmits every round. Arguments as
    :class:`DOADP` (``fraction_evaluate`` defaults to 0.0, not Flower's 1.0: federated evaluation is
    refused), hyperparameters the fields of :class:`~flwr_strategies.doadp.config.DPDDAConfig`."""

    core_cls = DPDDAServer
    hyperparameters = {"config": DPDDAConfig, "graph": GRAPH}


class CPGT(_Private):
    """CPGT (Xie, Yi, Wang, Cao, Ren, IFAC 2023), baseline of DO-ADP: compressed gradient tracking
    with Laplace noise on both transmitted variables before Top-k. Its epsilon is a heuristic
    calibration, not certified. Arguments as :class:`DOADP` (``fraction_evaluate`` defaults to 0.0, not
    Flower's 1.0: federated evaluation is refused), hyperparameters the fields of
    :class:`~flwr_strategies.doadp.config.CPGTConfig`."""

    core_cls = CPGTServer
    hyperparameters = {"config": CPGTConfig, "graph": GRAPH}
