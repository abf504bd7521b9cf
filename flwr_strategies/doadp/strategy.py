"""DO-ADP strategy (legacy Flower API): one Flower round = one iteration of Algorithm 1.

Paper: W. Huo, C. Liu, K. Ding, K. H. Johansson, L. Shi, "Decentralized Optimization with Amplified
Privacy via Efficient Communication".

The server emulates the peer graph (shared core :class:`DecentralizedStrategy`: topology, mixing
matrix, partition resolution). It holds the public copies ``XHAT`` (what crosses the network; its
table ``self.models``), draws the activation coins, and sends each agent its consensus term
``cons_i = gamma * sum_j w_ij (xhat_j - xhat_i)`` (dense; an emulation artefact that a real
deployment computes locally from received messages). Each client keeps its private model, momentum
and own public copy in ``context.state`` and returns its Top-k message (k indices + k values) when
active, or two empty arrays when inactive. ``aggregate_fit`` only applies ``XHAT[i] += s_i``; it does
no model averaging.

Per-round metrics: ``active``, ``paper_rate`` (active k / (n d)), ``p2p_bytes`` (what a real P2P
deployment moves: every active agent sends its k values + k indices to each neighbour),
``epsilon_spent`` (paper chain after t iterations; ``epsilon_spent_conservative`` too). The emulation's
own bytes are counted by the foundation's metering wrapper (``bytes_up``/``bytes_down``).

Evaluation: every ``eval_every`` rounds the clients also return their private model x_i (outside the
algorithm, not counted as P2P traffic); ``evaluate`` scores the network average xbar.
"""

from __future__ import annotations

import warnings
from logging import WARNING
from typing import Any, Optional

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, log, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ..decentralized.strategy import DecentralizedStrategy
from ..privacy.doadp_accountant import doadp_privacy
from .algorithm import DOADPParams, consensus_terms
from .rng import activation_mask

__all__ = ["DOADPStrategy"]


class DOADPStrategy(DecentralizedStrategy):
    """DO-ADP: decentralized momentum SGD with amplified DP (random activation + Top-k messages).

    Parameters
    ----------
    doadp : DOADPParams
        Algorithm hyperparameters (alpha, gamma, beta, p, k, sigma, G, clip_mode, batch_size, seed).
        ``sigma`` should come from :func:`flwr_strategies.privacy.doadp_sigma`.
    privacy : dict | None (default: None)
        Accountant arguments for the spent-epsilon report and the budget stop: ``epsilon`` (budget),
        ``delta0``, ``q``, ``mode`` ("paper" or "conservative"); None disables accounting
        (non-private runs).
    public_copy : str (default: "zero")
        Initial public copies: ``"zero"`` (the paper) or ``"x0"``.
    eval_every : int (default: 10)
        Rounds between evaluations (clients then also return x_i).
    **kwargs
        Every :class:`DecentralizedStrategy` argument (num_clients, initial_parameters, topology,
        weights, evaluate_fn, on_fit_config_fn, ...). The topology must be static and connected.
    """

    def __init__(
        self,
        *,
        doadp: DOADPParams,
        privacy: dict[str, Any] | None = None,
        public_copy: str = "zero",
        eval_every: int = 10,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("dtype", np.float64)
        kwargs.setdefault("client_eval_every", 0)
        super().__init__(**kwargs)
        if self.topology.time_varying:
            raise ValueError("DO-ADP needs a static graph (public copies live on fixed edges)")
        if public_copy not in ("zero", "x0"):
            raise ValueError(f"public_copy must be 'zero' or 'x0', got {public_copy!r}")
        if int(eval_every) < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every!r}")
        self.params = doadp
        self.d = int(self.layout.size)
        doadp.check_dim(self.d)
        self.x0 = self.models.data[0].copy()
        self.private = self.models.data.copy()  # last reported private models (evaluation only)
        if public_copy == "zero":
            self.models.data = np.zeros_like(self.models.data)
        self.public_copy = public_copy
        self.eval_every = int(eval_every)
        self.privacy = dict(privacy) if privacy else None
        self.W_dense = self.mixing_matrix(1).toarray()
        self.degrees = (self.W_dense > 0).sum(axis=1) - 1
        self.budget_exhausted = False
        self._eta: np.ndarray | None = None
        self.total_p2p_bytes = 0
        pr = doadp
        self._hyper = {
            "doadp_alpha": pr.alpha, "doadp_gamma": pr.gamma, "doadp_beta": pr.beta, "doadp_p": pr.p,
            "doadp_k": int(pr.k), "doadp_sigma": pr.sigma, "doadp_G": -1.0 if pr.G is None else float(pr.G),
            "doadp_clip_mode": pr.clip_mode, "doadp_batch_size": int(pr.batch_size),
            "doadp_msg_dtype": pr.msg_dtype, "doadp_seed": int(pr.seed), "doadp_allow_low_p": int(pr.allow_low_p),
        }
        self.active_steps = 0

    # ------------------------------------------------------------------ privacy
    def spent_epsilon(self, iterations: int, mode: str | None = None) -> float:
        """eps_tilde of the paper chain after ``iterations`` iterations (0 if no accounting)."""
        if not self.privacy or iterations < 1:
            return 0.0
        if self.params.sigma <= 0:
            return float("inf")
        pv = self.privacy
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return doadp_privacy(
                self.params.sigma, pv["delta0"], int(iterations), self.params.p, int(self.params.k), self.d,
                int(pv["q"]), float(self.params.G), batch_size=self.params.batch_size,
                clip_mode=self.params.clip_mode, mode=mode or pv.get("mode", "paper"),
                allow_low_p=self.params.allow_low_p,
            ).eps_tilde

    def network_average(self) -> list[np.ndarray]:
        return self.layout.unflatten(self.private.mean(axis=0))

    # ------------------------------------------------------------------ Flower API
    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        t = server_round - 1
        if self.privacy and not self.budget_exhausted:
            budget = float(self.privacy["epsilon"])
            if self.spent_epsilon(t + 1) > budget:
                self.budget_exhausted = True
                log(
                    WARNING,
                    "DO-ADP: stopping before round %s: one more iteration would spend epsilon=%.4g > budget %.4g "
                    "(sigma=%.4g was calibrated for fewer iterations); no further rounds are run",
                    server_round, self.spent_epsilon(t + 1), budget, self.params.sigma,
                )
        if self.budget_exhausted:
            return []
        proxies = self._resolver(client_manager)
        n = self.num_clients
        if sorted(proxies) != list(range(n)):
            raise ValueError(f"DO-ADP needs all {n} partitions 0..{n - 1}; got {sorted(proxies)}")
        eta = activation_mask(self.params.seed, t, n, self.params.p)
        self._eta = eta
        cons = consensus_terms(self.W_dense, self.models.data, self.params.gamma)
        report = int(server_round % self.eval_every == 0)
        base = dict(self.on_fit_config_fn(server_round)) if self.on_fit_config_fn else {}
        out = []
        for pid in range(n):
            arrays = [cons[pid]]
            if server_round == 1:
                arrays.append(self.x0)
            cfg = {**base, **self._hyper, "server_round": server_round, "t": t, "active": int(eta[pid]),
                   "report_model": report, "partition-id": pid}
            out.append((proxies[pid], FitIns(ndarrays_to_parameters(arrays), cfg)))
        return out

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Optional[Parameters], dict[str, Scalar]]:
        if failures:
            raise RuntimeError(
                f"DO-ADP round {server_round}: {len(failures)} client(s) failed; public copies would "
                "diverge from the agents' own copies, so the run stops"
            )
        eta = self._eta
        k = int(self.params.k)
        seen = np.zeros(self.num_clients, dtype=bool)
        losses, p2p = [], 0
        vbytes = np.dtype(self.params.msg_dtype).itemsize
        for proxy, res in results:
            pid = self._pid(proxy, res)
            seen[pid] = True
            arrays = parameters_to_ndarrays(res.parameters)
            idx, val = arrays[0], arrays[1]
            if eta[pid]:
                if idx.shape != (k,) or val.shape != (k,):
                    raise ValueError(f"active agent {pid} must send k={k} indices and values, got {idx.shape}")
                self.models.data[pid, idx.astype(np.int64)] += val.astype(np.float64)
                p2p += int(self.degrees[pid]) * k * (vbytes + idx.dtype.itemsize)
            elif idx.size or val.size:
                raise ValueError(f"inactive agent {pid} sent a message")
            if len(arrays) > 2:
                self.private[pid] = arrays[2]
            if "train_loss" in res.metrics and eta[pid]:
                losses.append(float(res.metrics["train_loss"]))
        if not seen.all():
            raise RuntimeError(f"DO-ADP round {server_round}: missing agents {np.flatnonzero(~seen).tolist()}")
        n_act = int(eta.sum())
        self.total_p2p_bytes += p2p
        self.active_steps += n_act
        metrics: dict[str, Scalar] = {
            "active": n_act,
            "paper_rate": n_act * k / (self.num_clients * self.d),
            "p2p_bytes": p2p,
            "p2p_bytes_dense_equivalent": int(self.degrees.sum()) * self.d * vbytes,
        }
        if self.privacy:
            metrics["epsilon_spent"] = self.spent_epsilon(server_round)
            metrics["epsilon_spent_conservative"] = self.spent_epsilon(server_round, "conservative")
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        return ndarrays_to_parameters(self.network_average()), metrics

    def evaluate(self, server_round: int, parameters: Parameters):
        if server_round % self.eval_every != 0 and server_round != 0:
            return None
        if self.evaluate_fn is None:
            return None
        res = self.evaluate_fn(server_round, self.network_average(), {})
        if res is None:
            return None
        loss, metrics = res
        metrics = dict(metrics)
        metrics["consensus_distance"] = float(np.mean(np.sum((self.private - self.private.mean(0)) ** 2, axis=1)))
        return float(loss), metrics
