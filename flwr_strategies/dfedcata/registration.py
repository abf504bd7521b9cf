"""Registrations: ``dfedcata``, ``dfedavg``, ``dfedavgm``, ``dfedsam``, ``dpsgd`` (decentralized: every
peer trains every round and gossips over the peer graph) and ``fedsam`` (centralized).

Method settings (``--set key=value``) are the fields of the strategy classes' configs (the peer
graph, :class:`~flwr_strategies.decentralized.config.GraphConfig`; DFedCata's
:class:`~flwr_strategies.dfedcata.config.DFedCataConfig`) and of the peers' local rule
(:class:`~flwr_strategies.dfedcata.config.LocalRuleConfig`), with their declared defaults and sources;
:data:`OVERRIDES` names the values a method runs instead (DFedAvgM's momentum 0.9, DFedSAM's and
FedSAM's rho 0.1, D-PSGD's one step per round, peer scoring every round).

Training defaults (``train_defaults``) and hyperparameters carry their source (shown by
``python -m simulations defaults dfedcata``): lr 0.1 decayed x0.998 per round, K = 5 local
epochs, 100 clients, all training every round (FedSAM: 10%) (paper, App. A-A); batch 128, weight
decay 5e-4, gradient clipping 10, no local momentum (official code, ``train_1.py`` and
``client/client.py``). Two
choices differ from the official code on purpose and say so: Metropolis-Hastings mixing weights
on irregular graphs (the official code averages uniformly over ``{i} + N_i``, which is only
row-stochastic there), and the paper's synchronous rounds. The official code's whole
configuration is :data:`~flwr_strategies.dfedcata.config.CODE_OPTIONS` (the ``dfedcata-code``
preset).

Every setting is validated when the strategy is built, before any training.
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, register_method
from ..setup import ServerSetup

PAPER = ("Li, Zhang, Liu, Yin, Shen, Cao, 'Boosting the Performance of Decentralized Federated Learning via "
         "Catalyst Acceleration', arXiv:2410.07272")
CLIENT = "flwr_strategies.clients.dfedcata:DecentralizedClient"

_APP_A = "paper: DFedCata App. A-A (implementation details)"

#: The paper's training settings (App. A-A, CIFAR-10) where it gives them, the official code's else.
DECENTRALIZED_TRAIN_DEFAULTS: dict[str, tuple[Any, str]] = {
    "lr": (0.1, f"{_APP_A}: local lr 0.1"),
    "lr_decay": (0.998, f"{_APP_A}: lr x0.998 per round"),
    "local_epochs": (5, f"{_APP_A}: K = 5 local epochs on CIFAR-10"),
    "batch_size": (128, "official code: train_1.py --batchsize 128 (the paper gives none)"),
    "weight_decay": (5e-4, "official code: train_1.py --weight-decay 0.0005 (the paper gives none)"),
    "grad_clip": (10.0, "official code: client/client.py clip_grad_norm_(max_norm=10) (the paper gives none)"),
    "momentum": (0.0, "official code: client/client.py plain SGD (train_1.py --momentum 0)"),
    "num_clients": (100, f"{_APP_A}: 100 clients"),
    "fraction_fit": (1.0, f"{_APP_A}: every client trains in decentralized methods"),
}
#: FedSAM is a centralized baseline: 10% of the 100 clients per round (paper App. A-A).
FEDSAM_TRAIN_DEFAULTS: dict[str, tuple[Any, str]] = {
    **DECENTRALIZED_TRAIN_DEFAULTS,
    "fraction_fit": (0.1, f"{_APP_A}: 10% of the clients train in centralized methods"),
}

#: The values the command line runs instead of the strategy classes' declared defaults.
_EVAL_PEERS = {"client_eval_every": (1, "project: the command line scores the peers' own models every round (the "
                                        "results tables report them); the strategy classes only on request (0)")}
_SAM = {"rho": (0.1, "paper: host paper (DFedCata) App. A-A: SAM perturbation rho = 0.1")}
OVERRIDES: dict[str, dict[str, tuple[Any, str]]] = {
    "dfedcata": _EVAL_PEERS,
    "dfedavg": _EVAL_PEERS,
    "dfedavgm": {**_EVAL_PEERS, "local_momentum": (0.9, "official code: train_1.py --mu 0.9 (client momentum; the "
                                                        "DFedCata paper gives none)")},
    "dfedsam": {**_EVAL_PEERS, **_SAM},
    "dpsgd": {**_EVAL_PEERS, "steps_per_round": (1, "project: one SGD step per round, Lian et al.'s D-PSGD (the host "
                                                    "paper gives no local steps; its D-PSGD accuracy fits one step)")},
    "fedsam": _SAM,
}
_DERIVED = {"lr": "--lr (the run's round-1 rate)"}
_RULE = "flwr_strategies.dfedcata.config:LocalRuleConfig"


def peer_graph(params: dict, setup: ServerSetup | None = None) -> dict[str, Any]:
    """``derive`` of a peer method: ``allow_disconnected`` as the graph takes it (``--set`` gives
    ``auto``/``true``/``false``), and DFedCata's ``lr``, the run's round-1 rate (checks ``lr * lam < 1``)."""
    from ..decentralized.config import GraphConfig

    out: dict[str, Any] = {"allow_disconnected": GraphConfig.from_params(params).allow_disconnected}
    if setup is not None:
        out["lr"] = setup.train.lr
    return out


def _peers(setup: ServerSetup, params: dict) -> dict[str, Any]:
    """:class:`~flwr_strategies.decentralized.server.DecentralizedCore` arguments from the run
    setup; conflicting momentum settings of the peers' local rule fail here, before training."""
    from .config import LocalRuleConfig

    LocalRuleConfig.from_params(params).momentum(setup.train.momentum)
    return {"num_partitions": setup.num_clients, "seed": setup.seed, "on_train_config": setup.fit_config,
            "fraction_train": setup.fraction_fit}


_TPAMI = "Sun, Li, Wang, 'Decentralized Federated Averaging', IEEE TPAMI 2022"
#: The peer methods: ``(name, summary, paper, strategy class)``; their overrides are :data:`OVERRIDES`.
PEER_METHODS = (
    ("dfedcata", "DFedCata: DFedAvg + Moreau-envelope local steps (lam=0.05) + Nesterov extrapolation (beta=0.99), "
                 "random-10 graph", PAPER, "DFedCata"),
    ("dfedavg", "DFedAvg: local SGD on every peer, then gossip averaging over the peer graph", _TPAMI, "DFedAvg"),
    ("dfedavgm", "DFedAvgM: DFedAvg with heavy-ball local SGD (momentum 0.9, reset each round)", _TPAMI, "DFedAvg"),
    ("dfedsam", "DFedSAM: DFedAvg with SAM local steps (rho=0.1), one gossip step per round",
     "Shi et al., 'Improving the Model Consistency of Decentralized Federated Learning', ICML 2023", "DFedAvg"),
    ("dpsgd", "D-PSGD: one SGD step per round, x_i <- sum_j w_ij x_j - lr grad f_i(x_i)",
     "Lian et al., 'Can Decentralized Algorithms Outperform Centralized Algorithms?', NeurIPS 2017", "DPSGD"),
)

for _name, _summary, _paper, _strategy in PEER_METHODS:
    register_method(MethodSpec(
        name=_name, summary=_summary, paper=_paper, strategy="flwr_strategies.dfedcata.strategy:" + _strategy,
        overrides=OVERRIDES[_name], derived=_DERIVED if _name == "dfedcata" else {}, settings=(_RULE,), client=CLIENT,
        train_defaults=DECENTRALIZED_TRAIN_DEFAULTS, derive=peer_graph, core_arguments=_peers))
register_method(MethodSpec(
    name="fedsam", summary="FedSAM: FedAvg with SAM local steps (rho=0.1)",
    paper="Qu et al., ICML 2022; Caldarola et al., ECCV 2022", strategy="flwr_strategies.baselines.strategy:FedSAM",
    settings=(_RULE,), overrides=OVERRIDES["fedsam"], client=CLIENT, train_defaults=FEDSAM_TRAIN_DEFAULTS))
