"""Registrations: ``dfedcata``, ``dfedavg``, ``dfedavgm``, ``dfedsam``, ``dpsgd`` (decentralized: every
peer trains every round and gossips over the peer graph) and ``fedsam`` (centralized).

Method settings (``--set key=value``):

- graph (decentralized methods; :class:`~flwr_strategies.decentralized.config.GraphConfig`):
  ``topology`` ("random"; also random_code, ring, grid, exponential, exponential_sym, full,
  erdos_renyi, watts_strogatz), ``neighbours`` (10), ``topology_p`` (-1 = generator default),
  ``ws_k`` (8), ``weights`` ("auto"), ``allow_row_stochastic`` (False), ``allow_disconnected``
  ("auto"), ``failure_policy`` ("renormalize"), ``client_eval_every`` (1), ``client_eval_max`` (0);
- DFedCata (:class:`~flwr_strategies.dfedcata.config.DFedCataConfig`): ``beta`` (0.99), ``lam``
  (0.05), ``extrapolation_anchor`` ("prev_mixed"), ``sequential_inplace`` (False; one Flower round
  per peer, so ``--rounds`` counts turns: ``num_clients x`` the algorithm rounds), ``clip_scope``
  ("data"; "official" = the official code's clip of ``g - lam x_0``);
- local rules (:class:`~flwr_strategies.dfedcata.config.LocalRuleConfig`): DFedAvgM
  ``local_momentum`` (0.9), DFedSAM/FedSAM ``rho`` (0.1), D-PSGD ``steps_per_round`` (1).

Training defaults (``train_defaults``, with provenance): lr 0.1 decayed x0.998 per round, 5 local
epochs (the paper's CIFAR-10 K), 100 clients, all of them training every round (FedSAM: 10%), no
local momentum (paper); batch 128, weight decay 5e-4, gradient clipping 10 (official code). The
official code's whole configuration is :data:`~flwr_strategies.dfedcata.config.CODE_OPTIONS` (the
``dfedcata-code`` preset).

Every setting is validated when the strategy is built, before any training.
"""

from __future__ import annotations

from typing import Any

from ..baselines.registration import core_kwargs as centralized_core_kwargs
from ..baselines.server import FedAvgServer
from ..decentralized.config import GraphConfig
from ..registry import MethodSpec, register_method
from ..setup import ServerSetup
from .config import DFedCataConfig, LocalRuleConfig
from .server import DFedAvgServer, DFedCataServer, DPSGDServer

PAPER = ("Li, Zhang, Liu, Yin, Shen, Cao, 'Boosting the Performance of Decentralized Federated Learning via "
         "Catalyst Acceleration', arXiv:2410.07272")
CLIENT = "flwr_strategies.clients.dfedcata:build_decentralized_client"

GRAPH_DEFAULTS: dict[str, Any] = {
    "topology": "random",
    "neighbours": 10,
    "topology_p": -1.0,
    "ws_k": 8,
    "weights": "auto",
    "allow_row_stochastic": False,
    "allow_disconnected": "auto",
    "failure_policy": "renormalize",
    "client_eval_every": 1,
    "client_eval_max": 0,
}

#: The paper's training settings (spec 000 section 5), shared by the decentralized methods.
DECENTRALIZED_TRAIN_DEFAULTS: dict[str, tuple[Any, str]] = {
    "lr": (0.1, "paper"),
    "lr_decay": (0.998, "paper"),
    "local_epochs": (5, "paper"),
    "batch_size": (128, "official code"),
    "weight_decay": (5e-4, "official code"),
    "grad_clip": (10.0, "official code"),
    "momentum": (0.0, "paper"),
    "num_clients": (100, "paper"),
    "fraction_fit": (1.0, "paper"),
}
#: FedSAM is a centralized baseline: 10% of the 100 clients per round (paper section V-A).
FEDSAM_TRAIN_DEFAULTS: dict[str, tuple[Any, str]] = {**DECENTRALIZED_TRAIN_DEFAULTS, "fraction_fit": (0.1, "paper")}


def decentralized_core_kwargs(setup: ServerSetup, params: dict) -> dict[str, Any]:
    """:class:`~flwr_strategies.decentralized.server.DecentralizedCore` arguments from the run
    setup; also validates the peers' local-rule settings so a bad value fails before training."""
    rule = LocalRuleConfig.from_params(params)
    rule.momentum(setup.train.momentum)  # conflicting momentum settings fail here
    return {
        "num_partitions": setup.num_clients,
        "graph": GraphConfig.from_params(params),
        "seed": setup.seed,
        "on_train_config": setup.fit_config,
        "fraction_train": setup.fraction_fit,
    }


def dfedcata_config(setup: ServerSetup, params: dict) -> DFedCataConfig:
    """:class:`DFedCataConfig` from the hyperparameters (``lr`` = the run's round-1 rate)."""
    return DFedCataConfig(beta=params["beta"], lam=params["lam"], lr=setup.train.lr,
                          extrapolation_anchor=params["extrapolation_anchor"],
                          sequential_inplace=params["sequential_inplace"])


def _dfedcata(setup: ServerSetup, params: dict) -> DFedCataServer:
    return DFedCataServer(setup.initial_parameters, config=dfedcata_config(setup, params),
                          **decentralized_core_kwargs(setup, params))


def _dfedavg(setup: ServerSetup, params: dict) -> DFedAvgServer:
    return DFedAvgServer(setup.initial_parameters, **decentralized_core_kwargs(setup, params))


def _dpsgd(setup: ServerSetup, params: dict) -> DPSGDServer:
    return DPSGDServer(setup.initial_parameters, **decentralized_core_kwargs(setup, params))


def _fedsam(setup: ServerSetup, params: dict) -> FedAvgServer:
    LocalRuleConfig.from_params(params)
    return FedAvgServer(setup.initial_parameters, **centralized_core_kwargs(setup))


SPECS = [
    MethodSpec(
        name="dfedcata",
        summary="DFedCata: DFedAvg + Moreau-envelope local steps (lam=0.05) + Nesterov extrapolation (beta=0.99), random-10 graph",
        paper=PAPER,
        defaults={"beta": 0.99, "lam": 0.05, "extrapolation_anchor": "prev_mixed", "sequential_inplace": False,
                  "clip_scope": "data", **GRAPH_DEFAULTS},
        build_core=_dfedcata,
        client=CLIENT,
        train_defaults=DECENTRALIZED_TRAIN_DEFAULTS,
        decentralized=True,
    ),
    MethodSpec(
        name="dfedavg",
        summary="DFedAvg: local SGD on every peer, then gossip averaging over the peer graph",
        paper="Sun, Li, Wang, 'Decentralized Federated Averaging', IEEE TPAMI 2022",
        defaults=dict(GRAPH_DEFAULTS),
        build_core=_dfedavg,
        client=CLIENT,
        train_defaults=DECENTRALIZED_TRAIN_DEFAULTS,
        decentralized=True,
    ),
    MethodSpec(
        name="dfedavgm",
        summary="DFedAvgM: DFedAvg with heavy-ball local SGD (momentum 0.9, reset each round)",
        paper="Sun, Li, Wang, 'Decentralized Federated Averaging', IEEE TPAMI 2022",
        defaults={"local_momentum": 0.9, **GRAPH_DEFAULTS},
        build_core=_dfedavg,
        client=CLIENT,
        train_defaults=DECENTRALIZED_TRAIN_DEFAULTS,
        decentralized=True,
    ),
    MethodSpec(
        name="dfedsam",
        summary="DFedSAM: DFedAvg with SAM local steps (rho=0.1), one gossip step per round",
        paper="Shi et al., 'Improving the Model Consistency of Decentralized Federated Learning', ICML 2023",
        defaults={"rho": 0.1, **GRAPH_DEFAULTS},
        build_core=_dfedavg,
        client=CLIENT,
        train_defaults=DECENTRALIZED_TRAIN_DEFAULTS,
        decentralized=True,
    ),
    MethodSpec(
        name="dpsgd",
        summary="D-PSGD: one SGD step per round, x_i <- sum_j w_ij x_j - lr grad f_i(x_i)",
        paper="Lian et al., 'Can Decentralized Algorithms Outperform Centralized Algorithms?', NeurIPS 2017",
        defaults={"steps_per_round": 1, **GRAPH_DEFAULTS},
        build_core=_dpsgd,
        client=CLIENT,
        train_defaults=DECENTRALIZED_TRAIN_DEFAULTS,
        decentralized=True,
    ),
    MethodSpec(
        name="fedsam",
        summary="FedSAM: FedAvg with SAM local steps (rho=0.1)",
        paper="Qu et al., ICML 2022; Caldarola et al., ECCV 2022",
        defaults={"rho": 0.1},
        build_core=_fedsam,
        client=CLIENT,
        train_defaults=FEDSAM_TRAIN_DEFAULTS,
    ),
]

for _spec in SPECS:
    register_method(_spec)
