"""Pure-NumPy reference simulator of the whole DO-ADP network (Huo et al., Algorithm 1, in compact matrix form).

It runs exactly the per-agent code of :func:`.algorithm.agent_round` with each agent's private
generator :func:`.rng.agent_generator` (client seed, t), so for the same client seeds its trajectory
equals the Flower strategy + client path (a unit test). It is the engine for the unit oracles and
for long runs (Experiment A), where one Flower round per iteration is too slow. With
``client_seeds=None`` every agent draws OS entropy, as in a deployment.

A *problem* object provides ``n, q, d`` and ``per_sample_grads(i, x, idx) -> (b, d)`` (and
optionally ``batched_grads(agents, X, idx)``; see :class:`.problems.LogRegProblem`).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from .algorithm import AgentState, DOADPParams, agent_round, consensus_terms
from .clipping import clip_per_sample
from .rng import agent_generator, draw_batch

__all__ = ["DOADPNetwork", "check_mixing", "run_doadp", "run_dmsgd", "EvalFn"]

EvalFn = Callable[[int, np.ndarray, np.ndarray], dict]
"""``evaluate(t, xbar, X) -> dict of scalars``."""


def check_mixing(W: np.ndarray, atol: float = 1e-10) -> np.ndarray:
    """Validate a dense mixing matrix: square, symmetric, doubly stochastic, non-negative, connected."""
    W = np.asarray(W.toarray() if hasattr(W, "toarray") else W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"mixing matrix must be square, got shape {W.shape}")
    if not np.allclose(W, W.T, atol=atol):
        raise ValueError("mixing matrix must be symmetric")
    if (W < -atol).any():
        raise ValueError("mixing matrix must be non-negative")
    if not np.allclose(W.sum(axis=1), 1.0, atol=atol):
        raise ValueError("mixing matrix rows must sum to 1")
    ev = np.sort(np.abs(np.linalg.eigvalsh(W)))[::-1]
    if W.shape[0] > 1 and ev[1] >= 1.0 - 1e-12:
        raise ValueError("graph of the mixing matrix is not connected (|lambda_2| = 1)")
    return W


def _recorder(evaluate: EvalFn | None, **entries) -> tuple[dict, Callable[[int, np.ndarray, np.ndarray], None]]:
    """A run's history (``t`` and ``entries``) and ``record(t, xbar, X)``, which appends ``t`` and
    ``evaluate(t, xbar, X)``'s values to it (nothing when ``evaluate`` is None)."""
    hist: dict = {"t": [], **entries}

    def record(t, xbar, X):
        if evaluate is None:
            return
        hist["t"].append(t)
        for key, val in evaluate(t, xbar, X).items():
            hist.setdefault(key, []).append(val)

    return hist, record


def _seeds(client_seeds, n: int) -> list[int | None]:
    if client_seeds is None:
        return [None] * n
    seeds = list(client_seeds)
    if len(seeds) != n:
        raise ValueError(f"client_seeds has {len(seeds)} entries for {n} agents")
    return seeds


def _network(problem, W, x0, client_seeds) -> tuple[np.ndarray, list, list[Callable], np.ndarray]:
    """The checked W, each agent's seed and gradient oracle, and the models X (every row x0)."""
    W = check_mixing(W)
    fns = [(lambda i: (lambda x, idx: problem.per_sample_grads(i, x, idx)))(i) for i in range(problem.n)]
    return W, _seeds(client_seeds, W.shape[0]), fns, np.tile(np.asarray(x0, dtype=np.float64), (W.shape[0], 1))


class DOADPNetwork:
    """All n agents' private states; the public copies are the agents' own ``xhat``.

    Parameters
    ----------
    problem : object
        Gradient oracle (see module docstring).
    W : array
        n x n symmetric doubly stochastic mixing matrix of a connected graph.
    x0 : np.ndarray
        Common initial model (d,).
    params : DOADPParams
        Per-agent hyperparameters (sigma already calibrated).
    gamma : float
        Consensus step size.
    client_seeds : sequence of int | None
        Each agent's client-side seed (None: OS entropy for every agent).
    public_copy : str
        ``"zero"`` (paper) or ``"x0"``.
    X0 : np.ndarray or None
        Optional distinct initial models (n, d) (to test consensus from different starts).
    """

    def __init__(self, problem, W, x0, params: DOADPParams, gamma: float, client_seeds: Sequence[int] | None = None,
                 public_copy: str = "zero", X0=None):
        self.problem = problem
        self.W = check_mixing(W)
        self.params = params
        self.gamma = float(gamma)
        n, d = self.W.shape[0], int(np.asarray(x0).shape[0])
        if n != problem.n:
            raise ValueError(f"W is {n}x{n} but the problem has n={problem.n} agents")
        params.check_dim(d)
        X0 = np.tile(np.asarray(x0, dtype=np.float64), (n, 1)) if X0 is None else np.asarray(X0, float)
        self.agents = [AgentState.initial(X0[i], public_copy) for i in range(n)]
        self.seeds = _seeds(client_seeds, n)
        self.t = 0
        self.n, self.d = n, d
        self.values_sent = 0
        self.active_steps = np.zeros(n, dtype=np.int64)
        self.grad_seconds = 0.0

    @property
    def X(self) -> np.ndarray:
        return np.stack([a.x for a in self.agents])

    @property
    def XHAT(self) -> np.ndarray:
        return np.stack([a.xhat for a in self.agents])

    @property
    def M(self) -> np.ndarray:
        return np.stack([a.m for a in self.agents])

    def _grad_fn(self, i: int):
        def fn(x, idx):
            t0 = time.perf_counter()
            out = self.problem.per_sample_grads(i, x, idx)
            self.grad_seconds += time.perf_counter() - t0
            return out

        return fn

    def step(self) -> np.ndarray:
        """One synchronous iteration; returns the activation vector."""
        cons = consensus_terms(self.W, self.XHAT, self.gamma)
        out = [agent_round(st, cons[i], self.params, agent_generator(self.seeds[i], self.t), self._grad_fn(i),
                           self.problem.q) for i, st in enumerate(self.agents)]
        self.agents = [nxt for nxt, _ in out]
        eta = np.array([res.active for _, res in out], dtype=bool)
        self.values_sent += int(eta.sum()) * int(self.params.k)
        self.active_steps += eta
        self.t += 1
        return eta


def run_doadp(problem, W, x0, params: DOADPParams, T: int, gamma: float = 0.05, client_seeds=None,
              evaluate: EvalFn | None = None, eval_every: int = 100, public_copy: str = "zero") -> dict:
    """Run T iterations of DO-ADP; returns a history dict of lists (``t`` plus evaluate's keys)."""
    net = DOADPNetwork(problem, W, x0, params, gamma, client_seeds=client_seeds, public_copy=public_copy)
    hist, record = _recorder(evaluate)
    record(0, net.X.mean(axis=0), net.X)
    t0 = time.perf_counter()
    for _ in range(T):
        net.step()
        if net.t % eval_every == 0 or net.t == T:
            record(net.t, net.X.mean(axis=0), net.X)
    hist.update(wall_s=time.perf_counter() - t0, comm_rate=net.values_sent / max(1, T * net.n * net.d),
                xbar=net.X.mean(axis=0), active_steps=net.active_steps)
    return hist


def run_dmsgd(problem, W, x0, alpha: float, gamma: float, beta: float, T: int, client_seeds=None,
              batch_size: int = 1, evaluate: EvalFn | None = None, eval_every: int = 100) -> dict:
    """Non-private decentralized momentum SGD (eq. 2 of the paper), dense exchange every round.

    ``m <- g + beta m; x <- x - alpha m + gamma sum_j w_ij (x_j - x_i)``, g the batch-mean gradient
    (no clipping). Each agent draws its coin (always active, p = 1) and batch from the same generator
    as DO-ADP, so DO-ADP with p=1, k=d, sigma=0, no clipping reproduces it exactly.
    """
    W, seeds, fns, X = _network(problem, W, x0, client_seeds)
    M = np.zeros_like(X)
    hist, record = _recorder(evaluate)
    record(0, X.mean(axis=0), X)
    for t in range(T):
        G = np.empty_like(X)
        for i in range(len(X)):
            rng = agent_generator(seeds[i], t)
            rng.random()  # the activation coin (p = 1: always active)
            idx = draw_batch(rng, problem.q, batch_size)
            G[i] = clip_per_sample(fns[i](X[i], idx), None).sum(axis=0) / batch_size
        cons = gamma * (W @ X - X)
        M = G + beta * M
        X = X - alpha * M + cons
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, X.mean(axis=0), X)
    hist.update(comm_rate=1.0, xbar=X.mean(axis=0), X=X)
    return hist
