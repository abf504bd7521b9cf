"""MethodSpec registrations: ``doadp`` and ``dmsgd`` (non-private decentralized momentum SGD).

Hyperparameters (``--set key=value``): ``epsilon`` (budget, <= 0: non-private), ``delta0``, ``p``,
``k_frac`` (k = max(1, round(k_frac d))), ``G``, ``clip_mode``, ``accounting`` ("paper" or
``"conservative"``), ``gamma``, ``beta``, ``public_copy``, ``eval_every``, ``hops`` (ring with +-hops
neighbours; the paper: 3), ``msg_dtype``. The step size alpha is the experiment's ``lr`` and the
batch size its ``batch_size``; T is the number of rounds; q the smallest local dataset.
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, register_method
from ..setup import ClientSetup, ServerSetup
from .algorithm import DOADPParams
from .graphs import ring_topology

PAPER = ("Huo, Liu, Ding, Johansson, Shi, 'Decentralized Optimization with Amplified Privacy via "
         "Efficient Communication'")

DEFAULTS: dict[str, Any] = {
    "epsilon": 1.0, "delta0": 1e-5, "p": 0.8, "k_frac": 0.4, "G": 1.0, "clip_mode": "coordinate",
    "accounting": "paper", "gamma": 0.05, "beta": 0.15, "public_copy": "zero", "eval_every": 10,
    "hops": 3, "msg_dtype": "float32",
}


def _dim(arrays) -> int:
    return int(sum(a.size for a in arrays))


def resolve(num_rounds: int, q: int, d: int, lr: float, batch_size: int, seed: int, params: dict) -> tuple[DOADPParams, dict | None]:
    """DOADPParams (sigma calibrated to ``epsilon`` over T = num_rounds) and the accountant dict."""
    from ..privacy import doadp_sigma

    k = max(1, min(d, int(round(float(params["k_frac"]) * d))))
    eps = float(params["epsilon"])
    private = eps > 0
    p, G = float(params["p"]), float(params["G"])
    sigma = 0.0
    if private:
        sigma = doadp_sigma(eps, float(params["delta0"]), int(num_rounds), p, k, d, int(q), G,
                            batch_size=int(batch_size), clip_mode=str(params["clip_mode"]),
                            mode=str(params["accounting"]))
    dp = DOADPParams(alpha=float(lr), gamma=float(params["gamma"]), beta=float(params["beta"]), p=p, k=k,
                     sigma=sigma, G=G if private or params.get("clip_nonprivate") else None,
                     clip_mode=str(params["clip_mode"]), batch_size=int(batch_size),
                     msg_dtype=str(params["msg_dtype"]), seed=int(seed))
    priv = {"epsilon": eps, "delta0": float(params["delta0"]), "q": int(q), "mode": str(params["accounting"])} if private else None
    return dp, priv


def _q(setup) -> int:
    return int(min(setup.num_examples.values()))


def _strategy(setup: ServerSetup, params: dict):
    from .strategy import DOADPStrategy

    if setup.fraction_fit != 1.0:
        raise ValueError(f"DO-ADP runs every agent every round; got fraction_fit={setup.fraction_fit}")
    d = _dim(setup.initial_parameters)
    dp, priv = resolve(setup.num_rounds, _q(setup), d, setup.train.lr, setup.train.batch_size, setup.seed, params)
    return DOADPStrategy(
        doadp=dp, privacy=priv, public_copy=str(params["public_copy"]), eval_every=int(params["eval_every"]),
        num_clients=setup.num_clients, initial_parameters=setup.initial_parameters,
        topology=ring_topology(setup.num_clients, int(params["hops"]), setup.seed), weights="uniform",
        evaluate_fn=setup.evaluate_fn, on_fit_config_fn=setup.fit_config,
    )


def _client(setup: ClientSetup, params: dict):
    from flwr_strategies.clients.doadp import DOADPClient

    return DOADPClient(setup, {"public_copy": params["public_copy"]})


register_method(MethodSpec(
    name="doadp",
    summary="DO-ADP: decentralized momentum SGD, DP noise amplified by random activation (p) and Top-k messages (k/d)",
    paper=PAPER, defaults=dict(DEFAULTS), build_strategy=_strategy, build_client=_client, decentralized=True,
))
register_method(MethodSpec(
    name="dmsgd",
    summary="Decentralized momentum SGD (non-private; DO-ADP with p=1, k=d, no noise, no clipping)",
    paper=PAPER, defaults={**DEFAULTS, "epsilon": 0.0, "p": 1.0, "k_frac": 1.0, "public_copy": "x0"},
    build_strategy=_strategy, build_client=_client, decentralized=True,
))
