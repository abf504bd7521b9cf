"""Registrations: ``dfedcata``, ``dfedavg``, ``dfedavgm``, ``dfedsam``, ``dpsgd`` (decentralized,
all clients train every round and gossip over the peer graph) and ``fedsam`` (centralized).

Shared decentralized hyperparameters (``--set key=value``):

- ``topology`` (str, default "random"): ring, grid, exponential, exponential_sym, full,
  erdos_renyi, watts_strogatz, random (paper: ~10 neighbours, redrawn every round);
- ``neighbours`` (int, 10): picks per node for ``random``; ``topology_p`` (float, -1 = generator
  default: 0.1 for erdos_renyi, 0.02 for watts_strogatz); ``ws_k`` (int, 8);
- ``weights`` (str, "auto"): auto / uniform / metropolis_hastings; ``allow_row_stochastic``
  (bool, False); ``allow_disconnected`` (str, "auto" = only for time-varying graphs);
- ``failure_policy`` (str, "renormalize" or "self");
- ``client_eval_every`` (int, 1; 0 = off), ``client_eval_max`` (int, 0 = all clients).

DFedCata only: ``beta`` (0.99), ``lam`` (0.05), ``extrapolation_anchor`` ("prev_mixed" = paper,
"prev_local" = public code), ``sequential_inplace`` (False; True = public-code order, one Flower
round per client, so ``--rounds`` must be ``num_clients x`` the algorithm rounds).

Paper settings (arXiv:2410.07272): lr 0.1 decayed x0.998 per round (``--lr 0.1 --lr-decay
0.998``), weight decay 5e-4 and clipping 10 from the reference code (``--weight-decay``,
``--grad-clip``), SAM rho 0.1, DFedAvgM momentum 0.9. Decentralized methods need
``fraction_fit = 1``.
"""

from __future__ import annotations

from typing import Any

from flwr.server.strategy import FedAvg

from flwr_strategies.clients.dfedcata import DecentralizedClient

from ..baselines.centralized import flower_common_kwargs
from ..decentralized.topology import Topology
from ..registry import MethodSpec, register_method
from ..setup import ClientSetup, ServerSetup
from .strategy import DFedAvg, DFedCata, DPSGD

PAPER = "Li, Zhang, Liu, Yin, Shen, Cao, 'Boosting the Performance of Decentralized FL via Catalyst Acceleration', arXiv:2410.07272"

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


def build_topology(setup: ServerSetup, params: dict) -> Topology:
    """The peer graph named by ``params["topology"]``, seeded with the run seed."""
    name = str(params["topology"]).replace("-", "_").lower()
    kw: dict[str, Any] = {}
    if name in ("random", "random10", "random_10"):
        kw["neighbours"] = int(params["neighbours"])
    if name in ("erdos_renyi", "er", "watts_strogatz", "ws") and float(params["topology_p"]) >= 0:
        kw["p"] = float(params["topology_p"])
    if name in ("watts_strogatz", "ws"):
        kw["k"] = int(params["ws_k"])
    return Topology(name, setup.num_clients, seed=setup.seed, **kw)


def decentralized_kwargs(setup: ServerSetup, params: dict) -> dict[str, Any]:
    """Constructor arguments of every :class:`DecentralizedStrategy` from the run setup."""
    if setup.fraction_fit != 1.0:
        raise ValueError(
            f"decentralized methods train every client every round; got fraction_fit={setup.fraction_fit} "
            "(the paper's 10% only sets the neighbourhood size: use --set neighbours=...)"
        )
    ad = str(params["allow_disconnected"]).lower()
    if ad not in ("auto", "true", "false", "1", "0"):
        raise ValueError(f"allow_disconnected must be auto/true/false, got {params['allow_disconnected']!r}")
    return {
        "num_clients": setup.num_clients,
        "initial_parameters": setup.initial_parameters,
        "topology": build_topology(setup, params),
        "weights": str(params["weights"]),
        "allow_row_stochastic": bool(params["allow_row_stochastic"]),
        "allow_disconnected": None if ad == "auto" else ad in ("true", "1"),
        "failure_policy": str(params["failure_policy"]),
        "evaluate_fn": setup.evaluate_fn,
        "on_fit_config_fn": setup.fit_config,
        "client_eval_every": int(params["client_eval_every"]),
        "client_eval_max": int(params["client_eval_max"]) or None,
    }


def _dfedcata(setup: ServerSetup, params: dict) -> DFedCata:
    return DFedCata(
        beta=float(params["beta"]),
        lam=float(params["lam"]),
        lr=setup.train.lr,
        extrapolation_anchor=str(params["extrapolation_anchor"]),
        sequential_inplace=bool(params["sequential_inplace"]),
        **decentralized_kwargs(setup, params),
    )


def _dfedavg(setup: ServerSetup, params: dict) -> DFedAvg:
    return DFedAvg(**decentralized_kwargs(setup, params))


def _dpsgd(setup: ServerSetup, params: dict) -> DPSGD:
    return DPSGD(**decentralized_kwargs(setup, params))


def _client(setup: ClientSetup, params: dict) -> DecentralizedClient:
    return DecentralizedClient(setup, params)


def _fedsam(setup: ServerSetup, params: dict) -> FedAvg:
    return FedAvg(**flower_common_kwargs(setup))


SPECS = [
    MethodSpec(
        name="dfedcata",
        summary="DFedCata: DFedAvg + Moreau-envelope local steps (lam=0.05) + Nesterov extrapolation (beta=0.99), random-10 graph",
        paper=PAPER,
        defaults={"beta": 0.99, "lam": 0.05, "extrapolation_anchor": "prev_mixed", "sequential_inplace": False,
                  **GRAPH_DEFAULTS},
        build_strategy=_dfedcata,
        build_client=_client,
        decentralized=True,
    ),
    MethodSpec(
        name="dfedavg",
        summary="DFedAvg: local SGD on every peer, then gossip averaging over the peer graph",
        paper="Sun, Li, Wang, 'Decentralized FL with Momentum and Local SGD', IEEE TPAMI 2022",
        defaults=dict(GRAPH_DEFAULTS),
        build_strategy=_dfedavg,
        build_client=_client,
        decentralized=True,
    ),
    MethodSpec(
        name="dfedavgm",
        summary="DFedAvgM: DFedAvg with heavy-ball local SGD (momentum 0.9, reset each round)",
        paper="Sun, Li, Wang, IEEE TPAMI 2022",
        defaults={"local_momentum": 0.9, **GRAPH_DEFAULTS},
        build_strategy=_dfedavg,
        build_client=_client,
        decentralized=True,
    ),
    MethodSpec(
        name="dfedsam",
        summary="DFedSAM: DFedAvg with SAM local steps (rho=0.1), one gossip step per round",
        paper="Shi et al., 'Improving the Model Consistency of Decentralized FL', ICML 2023",
        defaults={"rho": 0.1, **GRAPH_DEFAULTS},
        build_strategy=_dfedavg,
        build_client=_client,
        decentralized=True,
    ),
    MethodSpec(
        name="dpsgd",
        summary="D-PSGD: one SGD step per round, x_i <- sum_j w_ij x_j - lr grad f_i(x_i)",
        paper="Lian et al., 'Can Decentralized Algorithms Outperform Centralized Ones?', NeurIPS 2017",
        defaults={"steps_per_round": 1, **GRAPH_DEFAULTS},
        build_strategy=_dpsgd,
        build_client=_client,
        decentralized=True,
    ),
    MethodSpec(
        name="fedsam",
        summary="FedSAM: FedAvg with SAM local steps (rho=0.1)",
        paper="Qu et al., ICML 2022; Caldarola et al., ECCV 2022",
        defaults={"rho": 0.1},
        build_strategy=_fedsam,
        build_client=_client,
    ),
]

for _spec in SPECS:
    register_method(_spec)
