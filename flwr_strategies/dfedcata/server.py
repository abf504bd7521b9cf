"""Server cores of DFedCata, DFedAvg (also DFedAvgM's and DFedSAM's server) and D-PSGD.

Framework-neutral (NumPy in, NumPy out), on :class:`~flwr_strategies.decentralized.server.GossipCore`,
which keeps the tables at the algorithm's floor (see its docstring). The local rules run on the
peers (:mod:`flwr_strategies.dfedcata.local`).

Paper: Q. Li, M. Zhang, Y. Liu, Q. Yin, L. Shen, X. Cao, "Boosting the Performance of Decentralized
Federated Learning via Catalyst Acceleration", arXiv:2410.07272, Algorithm 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core.messages import Instruction, Reply
from ..core.validation import is_real
from ..decentralized.mixing import mix, mix_row
from ..decentralized.server import GossipCore
from .config import DFedCataConfig
from .extrapolation import extrapolate

__all__ = ["DFedAvgServer", "DPSGDServer", "DFedCataServer"]


class DFedAvgServer(GossipCore):
    """DFedAvg (Sun, Li, Wang, "Decentralized Federated Averaging", IEEE TPAMI 2022): K local steps
    from the mixed model, then gossip ``x_i^{t+1} = sum_j w_ij x_{j,K}^t``. The peers' local rule is
    the client's: plain SGD (DFedAvg), heavy-ball SGD (DFedAvgM) or SAM (DFedSAM); the server is the
    same. Takes every :class:`~flwr_strategies.decentralized.server.GossipCore` argument. Tables:
    the mixed models (+ the spare while the start points are built)."""


class DPSGDServer(GossipCore):
    """D-PSGD (Lian et al., "Can Decentralized Algorithms Outperform Centralized Algorithms?",
    NeurIPS 2017): ``x_i^{t+1} = sum_j w_ij x_j^t - lr g_i(x_i^t)``, i.e. the mix of the *old*
    models plus the peer's own local displacement ``y_i - x_i^t`` (the client runs one SGD step).
    A failed peer's displacement is zero. Tables: mixed models + one spare; the new models are
    built row by row into the spare (one row buffer), then the tables are swapped."""

    keeps_spare = True

    def returned_table(self, server_round: int, alive: np.ndarray) -> np.ndarray:
        """The spare table, failed rows holding their mixed models (a zero displacement)."""
        S = self.spare_table()
        dead = np.flatnonzero(~alive)
        S[dead] = self.models.data[dead]
        return S

    def commit(self, server_round: int, W: sp.csr_matrix, alive: np.ndarray) -> None:
        X, S = self.models.data, self.spare
        row = np.empty(X.shape[1], dtype=X.dtype)
        for i in range(X.shape[0]):
            mix_row(W, X, i, out=row)  # (W X)_i, the same arithmetic as mix()
            row += S[i]
            row -= X[i]
            S[i] = row  # row i of S is only this peer's returned model: free once read
        self.models.data, self.spare = S, X


class DFedCataServer(GossipCore):
    """DFedCata (arXiv:2410.07272, Algorithm 1): DFedAvg whose peers (i) start from the Nesterov-
    extrapolated point ``x_{i,0}^t = x_i^t + beta (x_i^t - a_i)`` and (ii) minimise the Moreau
    envelope ``f_i(x) + lam/2 ||x - x_{i,0}^t||^2`` (``lam`` is sent in every config; the client
    adds the proximal term, anchored at the point it receives).

    Parameters
    ----------
    initial_arrays : list[np.ndarray]
        Common initial model x^0.
    config : DFedCataConfig (default: DFedCataConfig())
        beta, lam, extrapolation anchor, sequential mode (paper defaults 0.99 / 0.05 / "prev_mixed"
        / synchronous).
    **kwargs
        :class:`~flwr_strategies.decentralized.server.GossipCore` arguments (num_partitions, graph,
        topology, seed, on_train_config, dtype).

    State: the mixed models ``x_i^t`` and the anchors ``a_i`` (``x_i^{t-1}`` for "prev_mixed",
    ``x_{i,K}^{t-1}`` for "prev_local"), both ``x^0`` at the start, so round 1 has no
    extrapolation; plus the spare table while the start points are built ("prev_mixed") or for the
    whole run ("prev_local"). A peer that fails keeps both (it skipped the round).

    Sequential mode (``config.sequential_inplace``, the official code's order): Flower round
    ``r`` is peer ``i = (r-1) % m`` of algorithm round ``t = (r-1) // m``. Peer i mixes the current
    table of *local* models ``z_i = sum_j w_ij L_j`` (rows of earlier peers already hold this round's
    models), extrapolates, trains, and its reply overwrites ``L_i``. The peers get the config of
    algorithm round ``t + 1`` (same lr, seed and minibatches as the synchronous round). The global
    model (``x_bar``, the mean of ``L``), the consensus distance, the graph metrics and the central
    evaluation are updated once per algorithm round, after the last peer's turn (``should_evaluate``).
    No spare table: each turn needs one row. Tables: local models (+ anchors for "prev_mixed").
    """

    def __init__(self, initial_arrays, *, config: DFedCataConfig | None = None, **kwargs: Any) -> None:
        self.config = config if config is not None else DFedCataConfig()
        if not isinstance(self.config, DFedCataConfig):
            raise TypeError(f"config must be a DFedCataConfig, got {type(self.config).__name__}")
        self.sequential = bool(self.config.sequential_inplace)
        super().__init__(initial_arrays, **kwargs)
        cfg = self.config
        self.beta = float(cfg.beta)
        self.lam = float(cfg.lam)
        self.anchor = cfg.extrapolation_anchor
        if self.sequential:
            self.spare = np.empty((0, self.layout.size), dtype=self.dtype)  # not needed: one row per turn
            self._seq_z = np.empty(self.layout.size, dtype=self.dtype)
            self._seq_y = np.empty(self.layout.size, dtype=self.dtype)
            self._seq_turn: tuple[int, int] | None = None
        # "prev_local" in sequential mode anchors at the peer's own row of the local table: no table
        self.anchors = None if (self.sequential and self.anchor == "prev_local") else self.models.data.copy()

    # ------------------------------------------------------------------ hooks
    def client_config(self, server_round: int) -> dict[str, Any]:
        return {"lam": self.lam}

    def base_config(self, server_round: int) -> dict[str, Any]:
        t_round = self.algorithm_round(server_round)
        cfg = super().base_config(t_round)
        if "lr" in cfg:
            self.config.check_lr(float(cfg["lr"]), t_round)
        return cfg

    def start_point(self, server_round: int, pid: int, out: np.ndarray) -> None:
        extrapolate(self.models.data[pid], self.anchors[pid], self.beta, out=out)

    @property
    def keeps_spare(self) -> bool:
        """With the ``"prev_local"`` anchor the returned models become the anchors and are mixed into
        ``X``: the spare table holds them."""
        return self.anchor == "prev_local"

    def returned_table(self, server_round: int, alive: np.ndarray) -> np.ndarray:
        """With the ``"prev_mixed"`` anchor, the anchors' table: the new anchors are ``x_i^t`` (a
        failed peer keeps its own), so ``X`` takes the failed peers' anchors and becomes the
        anchors' table, and the old anchors' table takes the returned models, its failed rows their
        mixed models. With ``"prev_local"``: the spare table, failed rows holding their mixed models."""
        X, P = self.models.data, self.anchors
        dead = np.flatnonzero(~alive)
        if self.anchor == "prev_local":
            S = self.spare_table()
            S[dead] = X[dead]
            return S
        previous = X[dead]  # a copy: the failed peers' mixed models (what they mix)
        X[dead] = P[dead]
        P[dead] = previous
        return P

    def commit(self, server_round: int, W: sp.csr_matrix, alive: np.ndarray) -> None:
        X, S, P = self.models.data, self.spare, self.anchors
        dead = np.flatnonzero(~alive)
        if self.anchor == "prev_mixed":  # P holds the returned models; X the new anchors
            mix(W, P, out=P)  # new mixed models, in place
            self.models.data, self.anchors = P, X
        else:  # prev_local: anchors <- the returned local models
            mix(W, S, out=X)  # X's rows are no longer needed (failed rows were copied into S)
            S[dead] = P[dead]
            self.anchors, self.spare = S, P

    def method_tables(self) -> dict[str, np.ndarray]:
        return {} if self.anchors is None else {"anchors": self.anchors}

    # ------------------------------------------------------------------ rounds
    def algorithm_round(self, server_round: int) -> int:
        """The algorithm round (1-based) that Flower round ``server_round`` belongs to."""
        if not self.sequential or server_round <= 0:
            return int(server_round)
        return (int(server_round) - 1) // self.num_partitions + 1

    def turn(self, server_round: int) -> tuple[int, int]:
        """Sequential mode: ``(t, i)``, the 0-based algorithm round and the peer of Flower round ``server_round``."""
        return divmod(int(server_round) - 1, self.num_partitions)

    def graph_round(self, server_round: int) -> int:
        return self.algorithm_round(server_round) - 1

    def evaluation_round(self, server_round: int) -> int:
        return self.algorithm_round(server_round)

    def should_evaluate(self, server_round: int) -> bool:
        return not self.sequential or server_round % self.num_partitions == 0

    def expected_peers(self, server_round: int) -> list[int]:
        """All peers; in sequential mode, the peer whose turn it is."""
        if not self.sequential:
            return super().expected_peers(server_round)
        return [self.turn(server_round)[1]]

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        if not self.sequential:
            return super().configure_train(server_round, partition_ids)
        _, i = self.turn(server_round)
        W = self.mixing_matrix(server_round)
        cfg = {**self.base_config(server_round), **self.client_config(server_round), "flower_round": int(server_round)}
        if i not in partition_ids:
            self._seq_turn = None
            return []
        L = self.models.data
        z = mix_row(W, L, i, out=self._seq_z)
        a = self.anchors[i] if self.anchor == "prev_mixed" else L[i]
        extrapolate(z, a, self.beta, out=self._seq_y)
        self._seq_turn = (int(server_round), i)
        return [self.instruction(server_round, i, self._seq_y, cfg)]

    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        if not self.sequential:
            return super().aggregate_train(server_round, replies, failed)
        t, i = self.turn(server_round)
        metrics: dict[str, Any] = {"client": i, "algorithm_round": t + 1}
        for reply in replies:  # validated: at most one, from peer i
            if reply.partition_id != i or self._seq_turn != (int(server_round), i):
                continue
            row = self.models.data[i]
            self.write_reply(reply, row)
            if self.anchor == "prev_mixed":
                self.anchors[i] = self._seq_z
            loss = reply.metrics.get("train_loss")
            if is_real(loss):
                metrics["train_loss"] = float(loss)
        self._seq_turn = None
        if i == self.num_partitions - 1:  # end of the algorithm round: bookkeeping once
            self.touched()
            W = self.mixing_matrix(server_round)
            metrics.update(self.round_metrics(server_round, int(W.nnz - self.num_partitions)))
        return metrics

    def extra_state(self) -> dict[str, Any]:
        out = super().extra_state()
        if self.sequential:  # the global model is the average at the last completed algorithm round
            out["global"] = list(self.global_arrays())
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self._seq_turn = None
        if self.sequential and "global" in state:
            arrays = [np.array(a) for a in state["global"]]
            if [a.shape for a in arrays] != [tuple(s) for s in self.layout.shapes]:
                raise ValueError("checkpoint's global model does not match the model layout")
            self._xbar = (self._version, arrays)
