"""Shared server side of the peer-graph methods of this folder (DO-ADP, D-mSGD, DPDO, DP-DDA, CPGT).

The server emulates the peer network: it holds the graph, the mixing matrix W and the *public*
tables (what every agent broadcasts), relays to each agent what its neighbours sent, and never
holds a client's private randomness. Every agent takes part in every round
(``full_participation``); an agent that fails or whose reply is rejected simply skips the round.

:class:`PeerServer` does what all five share:

- the model layout (flatten / unflatten; parameters must be floating point);
- the peer graph (``adjacency``, or the paper's circulant with ``hops``) and its mixing matrix;
- the planned number of rounds T (privacy calibration covers T rounds; more are refused);
- the initial model x0 sent to each agent until it has answered once;
- evaluation after round 0, every ``eval_every`` rounds and always after the last round; with
  ``evaluate_private`` (simulation only, outside the privacy guarantee) the agents also send their
  private models in those rounds and the server evaluates their average.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core.messages import Reply
from ..core.server import EvalFn, ServerCore
from ..core.validation import ReplyError
from .graphs import circulant_adjacency, graph_mixing

__all__ = ["PeerServer", "flatten_arrays"]


def flatten_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One float64 vector of all arrays in order."""
    return np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]) if arrays else np.zeros(0)


class PeerServer(ServerCore):
    """Base of the peer-graph cores (see the module docstring).

    Parameters
    ----------
    initial_arrays : list[np.ndarray]
        Initial model x0 (floating-point arrays only), shared by every agent.
    num_partitions : int
        Number of agents n (partition ids 0..n-1), >= 1.
    num_rounds : int
        Planned rounds T (one round = one iteration of the algorithm), >= 1.
    adjacency : array | scipy.sparse matrix | None (default: None)
        Undirected connected peer graph (n x n, 0/1). None: the paper's circulant with ``hops``.
    hops : int (default: 3, paper)
        Offsets ``+-1..+-hops`` of the circulant graph (ignored with ``adjacency``), >= 1.
    weights : str (default: "auto")
        Mixing weights (``"auto"``, ``"uniform"``, ``"metropolis_hastings"``); on the circulant,
        ``"auto"`` is the paper's ``W = I - L / (d_max + 1)``.
    eval_every : int (default: 10)
        Central evaluation period, >= 1 (round 0 and the last round are always evaluated).
    evaluate_private : bool (default: False)
        Ask for the agents' private models in evaluation rounds (simulation only; outside the
        guarantee).
    seed : int (default: 0)
        Seed of the server's own generator (unused by the methods here: no server randomness).
    on_train_config : callable | None
        Standard per-round client config (its ``seed`` entry is never forwarded).
    """

    full_participation = True

    def __init__(
        self,
        initial_arrays: Sequence[np.ndarray],
        *,
        num_partitions: int,
        num_rounds: int,
        adjacency=None,
        hops: int = 3,
        weights: str = "auto",
        eval_every: int = 10,
        evaluate_private: bool = False,
        seed: int = 0,
        on_train_config=None,
    ) -> None:
        super().__init__(initial_arrays, num_partitions=num_partitions, fraction_train=1.0, min_train=1, seed=seed,
                         on_train_config=on_train_config)
        bad = [j for j, a in enumerate(self.initial_arrays) if a.dtype.kind != "f"]
        if bad:
            raise ValueError(
                f"{type(self).__name__} needs floating-point parameters only (no integer buffers such as "
                f"BatchNorm's counters); arrays {bad} are {[str(self.initial_arrays[j].dtype) for j in bad]}"
            )
        if isinstance(num_rounds, bool) or int(num_rounds) != num_rounds or num_rounds < 1:
            raise ValueError(f"num_rounds must be an integer >= 1, got num_rounds={num_rounds!r}")
        if isinstance(eval_every, bool) or int(eval_every) != eval_every or eval_every < 1:
            raise ValueError(f"eval_every must be an integer >= 1, got eval_every={eval_every!r}")
        self.n = int(num_partitions)
        self.num_rounds = int(num_rounds)
        self.eval_every = int(eval_every)
        self.evaluate_private = bool(evaluate_private)
        self.shapes = [a.shape for a in self.initial_arrays]
        self.dtypes = [a.dtype for a in self.initial_arrays]
        self.sizes = [int(a.size) for a in self.initial_arrays]
        self.x0 = flatten_arrays(self.initial_arrays)
        self.d = int(self.x0.size)
        if adjacency is None:
            adjacency = circulant_adjacency(self.n, hops)
        A = sp.csr_matrix(adjacency)
        if A.shape != (self.n, self.n):
            raise ValueError(f"adjacency must be {self.n} x {self.n}, got shape {A.shape}")
        self.W = graph_mixing(A, weights)
        self.degrees = np.diff(self.W.indptr) - 1
        self.started = np.zeros(self.n, dtype=bool)
        self.private_models = np.zeros((self.n, self.d)) if self.evaluate_private else None
        self.reported = np.zeros(self.n, dtype=bool)

    # ------------------------------------------------------------------ layout
    def unflatten(self, vec: np.ndarray) -> list[np.ndarray]:
        """Arrays of the initial layout (and dtypes) from a flat vector."""
        out, pos = [], 0
        for shape, dt, size in zip(self.shapes, self.dtypes, self.sizes):
            out.append(np.asarray(vec[pos:pos + size], dtype=dt).reshape(shape).copy())
            pos += size
        return out

    # ------------------------------------------------------------------ rounds
    def check_round(self, server_round: int) -> None:
        if server_round > self.num_rounds:
            raise ValueError(
                f"{type(self).__name__} was planned (and its noise calibrated) for num_rounds={self.num_rounds}; "
                f"round {server_round} is beyond it"
            )

    def should_evaluate(self, server_round: int) -> bool:
        return server_round == 0 or server_round % self.eval_every == 0 or server_round == self.num_rounds

    def report_round(self, server_round: int) -> bool:
        """True when the agents send their private models this round (``evaluate_private`` only)."""
        return self.evaluate_private and self.should_evaluate(server_round)

    def round_config(self, server_round: int) -> dict[str, Any]:
        """The standard config without ``seed`` (a client's randomness never comes from the server)."""
        cfg = self.base_config(server_round)
        cfg.pop("seed", None)
        cfg["t"] = int(server_round) - 1
        cfg["report_model"] = int(self.report_round(server_round))
        return cfg

    def start_arrays(self, pid: int) -> list[np.ndarray]:
        """``[x0]`` for an agent that has not answered yet (it initialises from it), else ``[]``."""
        return [] if self.started[pid] else [self.x0]

    # ------------------------------------------------------------------ replies
    def split_report(self, server_round: int, reply: Reply) -> tuple[list[np.ndarray], np.ndarray | None]:
        """``(message arrays, private model or None)``; checks the private model's shape."""
        arrays = list(reply.arrays)
        if not self.report_round(server_round):
            return arrays, None
        if not arrays:
            raise ReplyError(f"partition {reply.partition_id}: evaluation round without the private model")
        x = arrays[-1]
        if x.dtype.kind != "f" or x.shape != (self.d,):
            raise ReplyError(
                f"partition {reply.partition_id}: private model must be a float vector of length {self.d}, "
                f"got {x.dtype} {x.shape}"
            )
        return arrays[:-1], x

    def commit_reports(self, server_round: int, replies: list[Reply]) -> None:
        """Store the private models of an evaluation round (call in the commit phase)."""
        for r in replies:
            self.started[r.partition_id] = True
            if self.report_round(server_round):
                _, x = self.split_report(server_round, r)
                self.private_models[r.partition_id] = x
                self.reported[r.partition_id] = True

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, server_round: int, evaluate_fn: EvalFn):
        res = evaluate_fn(server_round, self.global_arrays())
        if res is None or not self.evaluate_private or not self.reported.any():
            return res
        loss, metrics = res
        metrics = dict(metrics)
        X = self.private_models[self.reported]
        priv = evaluate_fn(server_round, self.unflatten(X.mean(axis=0)))
        if priv is not None:
            ploss, pmetrics = priv
            metrics["private_xbar_loss"] = float(ploss)
            for key, value in pmetrics.items():
                if isinstance(value, (int, float, np.integer, np.floating)):
                    metrics[f"private_xbar_{key}"] = float(value)
        metrics["private_consensus_distance"] = float(np.mean(np.sum((X - X.mean(0)) ** 2, axis=1)))
        metrics["private_models_outside_guarantee"] = 1
        return loss, metrics

    # ------------------------------------------------------------------ checkpoints
    def peer_state(self) -> dict[str, Any]:
        out = {"started": self.started.copy(), "reported": self.reported.copy()}
        if self.private_models is not None:
            out["private_models"] = self.private_models.copy()
        return out

    def load_peer_state(self, state: dict[str, Any]) -> None:
        self.started = np.array(state["started"], dtype=bool)
        self.reported = np.array(state["reported"], dtype=bool)
        if self.private_models is not None:
            self.private_models = np.array(state["private_models"], dtype=np.float64)
