"""DFedCata strategy (legacy Flower API) and the decentralized baselines' strategies.

Paper: Q. Li, M. Zhang, Y. Liu, Q. Yin, L. Shen, X. Cao, "Boosting the Performance of
Decentralized Federated Learning via Catalyst Acceleration", arXiv:2410.07272.

DFedCata = DFedAvg + (i) Moreau-envelope local steps (penalty ``lam``, run by the client,
anchored at the round's start point) + (ii) Nesterov extrapolation between rounds
(``beta``), which this server-side peer emulation applies before sending each client its
start point ``x_{i,0}^t = x_i^t + beta (x_i^t - a_i)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from flwr.common import FitIns, Scalar, ndarrays_to_parameters, parameters_to_ndarrays

from ..decentralized.consensus import consensus_distance
from ..decentralized.mixing import mix
from ..decentralized.strategy import DecentralizedStrategy
from .extrapolation import extrapolate
from .params import validate_dfedcata

__all__ = ["DFedCata", "DFedAvg", "DPSGD"]


class DFedAvg(DecentralizedStrategy):
    """DFedAvg (Sun, Li, Wang 2022): K local steps from the mixed model, then gossip
    ``x_i^{t+1} = sum_j w_ij x_{j,K}^t``. The local rule is the client's (plain SGD for
    DFedAvg, heavy-ball SGD for DFedAvgM, SAM for DFedSAM); the server side is identical.
    Takes every :class:`DecentralizedStrategy` argument."""


class DPSGD(DecentralizedStrategy):
    """D-PSGD (Lian et al. 2017): ``x_i^{t+1} = sum_j w_ij x_j^t - lr * grad f_i(x_i^t)``
    (combine the *old* models, add the client's own local displacement). The client runs one
    SGD step (``local_steps=1``). With failures, a failed client's displacement is zero."""

    def update_state(self, server_round, returned, mixed, alive):  # noqa: D102
        self.models.data = mixed

    def combine(self, W: sp.csr_matrix, returned: np.ndarray, alive: np.ndarray) -> np.ndarray:  # noqa: D102
        old = self.models.data
        out = mix(W, old)
        out += returned
        out -= old
        return out


class DFedCata(DecentralizedStrategy):
    """DFedCata: decentralized FL with Catalyst acceleration (arXiv:2410.07272, Algorithm 1).

    Parameters
    ----------
    beta : float (default: 0.99)
        Nesterov extrapolation coefficient, ``0 <= beta < 1`` (paper: 0.99; 0 disables it).
    lam : float (default: 0.05)
        Moreau-envelope penalty, ``lam >= 0`` and ``lr * lam < 1``; sent to the clients as
        ``config["lam"]`` (0 disables the proximal term).
    lr : float | None (default: None)
        Largest local learning rate of the run (round 0), only used to check ``lr * lam < 1``.
    extrapolation_anchor : str (default: "prev_mixed")
        ``"prev_mixed"``: paper rule ``x_i^t + beta (x_i^t - x_i^{t-1})`` on consecutive mixed
        models; ``"prev_local"``: public-code rule ``x_i^t + beta (x_i^t - x_{i,K}^{t-1})``.
    sequential_inplace : bool (default: False)
        The public code's sequential in-place order (spec A6): clients are processed in index
        order, client i mixes the *current* table of local models (already holding this round's
        models of clients j < i), extrapolates, trains and overwrites its slot. Emulated with one
        Flower round per client: Flower round ``r`` is algorithm round ``t = (r-1) // m`` for
        client ``i = (r-1) % m``, so run ``m * T`` Flower rounds for T algorithm rounds; the
        clients get ``on_fit_config_fn(t + 1)`` (same lr, seed and minibatches as synchronous
        round t). The table then holds local models; x_bar is their mean (as in the code).
        Order-dependent by design; for reproduction experiments only.
    **kwargs
        Every :class:`~flwr_strategies.decentralized.strategy.DecentralizedStrategy` argument
        (num_clients, initial_parameters, topology, weights, evaluate_fn, on_fit_config_fn...).

    State per client (server side): the mixed model ``x_i^t`` (``self.models``) and the anchor
    table ``self.prev`` (``x_i^{t-1}`` or ``x_{i,K}^{t-1}``), both initialised to ``x^0``, so
    round 0 has no extrapolation. A client that fails keeps both (it skipped the round).
    """

    def __init__(
        self,
        *,
        beta: float = 0.99,
        lam: float = 0.05,
        lr: float | None = None,
        extrapolation_anchor: str = "prev_mixed",
        sequential_inplace: bool = False,
        **kwargs: Any,
    ) -> None:
        validate_dfedcata(beta, lam, lr, extrapolation_anchor)
        super().__init__(**kwargs)
        self.sequential_inplace = bool(sequential_inplace)
        self._seq_z: np.ndarray | None = None
        self.beta = float(beta)
        self.lam = float(lam)
        self.extrapolation_anchor = extrapolation_anchor
        self.prev = self.models.data.copy()

    def start_points(self, server_round: int) -> np.ndarray:
        return extrapolate(self.models.data, self.prev, self.beta)

    def fit_config(self, server_round: int, pid: int) -> dict[str, Scalar]:
        cfg = super().fit_config(server_round, pid)
        lr = cfg.get("lr")
        if lr is not None and float(lr) * self.lam >= 1.0:
            raise ValueError(f"round {server_round}: lr * lam = {float(lr) * self.lam:.3g} must be < 1")
        cfg["lam"] = self.lam
        return cfg

    def update_state(self, server_round, returned, mixed, alive):  # noqa: D102
        if self.extrapolation_anchor == "prev_mixed":
            self.prev[alive] = self.models.data[alive]
        else:
            self.prev[alive] = returned[alive]
        self.models.data = mixed

    # ------------------------------------------------------------ sequential in-place mode
    def _seq_index(self, server_round: int) -> tuple[int, int]:
        return divmod(server_round - 1, self.num_clients)

    def configure_fit(self, server_round, parameters, client_manager):  # noqa: D102
        if not self.sequential_inplace:
            return super().configure_fit(server_round, parameters, client_manager)
        t, i = self._seq_index(server_round)
        proxies = self._resolver(client_manager)
        if i not in proxies:
            return []
        W = self.mixing_matrix(t + 1)
        L = self.models.data
        z = np.asarray(W.getrow(i) @ L).ravel().astype(L.dtype)
        a = self.prev[i] if self.extrapolation_anchor == "prev_mixed" else L[i]
        y0 = z + L.dtype.type(self.beta) * (z - a) if self.beta else z.copy()
        self._seq_z = z
        cfg = self.fit_config(t + 1, i)
        cfg["flower_round"] = int(server_round)
        return [(proxies[i], FitIns(ndarrays_to_parameters(self.layout.unflatten(y0)), cfg))]

    def aggregate_fit(self, server_round, results, failures):  # noqa: D102
        if not self.sequential_inplace:
            return super().aggregate_fit(server_round, results, failures)
        t, i = self._seq_index(server_round)
        metrics: dict[str, Scalar] = {"failures": len(failures), "client": i, "algorithm_round": t}
        for proxy, res in results:
            if self._pid(proxy, res) != i:
                raise ValueError(f"flower round {server_round} expected partition {i}")
            row = self.layout.flatten(parameters_to_ndarrays(res.parameters), dtype=self.models.data.dtype)
            if not np.all(np.isfinite(row)):
                raise FloatingPointError(f"client {i} returned a non-finite model (diverged)")
            self.models.data[i] = row
            if self.extrapolation_anchor == "prev_mixed":
                self.prev[i] = self._seq_z
            if "train_loss" in res.metrics:
                metrics["train_loss"] = float(res.metrics["train_loss"])
        metrics["consensus_distance"] = consensus_distance(self.models.data)
        return ndarrays_to_parameters(self.network_average()), metrics
