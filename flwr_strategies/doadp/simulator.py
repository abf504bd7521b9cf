"""Pure-NumPy reference simulator of the whole DO-ADP network (spec Sec. 2.2, compact form).

It uses exactly the per-agent math of :mod:`.algorithm` and the random streams of :mod:`.rng`, so
its trajectory equals the Flower strategy + client path for the same seed. It is the engine for the
unit oracles and for long runs (Experiment A), where a Flower round per iteration is too slow.

A *problem* object provides ``n, q, d`` and either ``batched_grads(agents, X, idx) -> (m, b, d)``
or ``per_sample_grads(i, x, idx) -> (b, d)`` (see :class:`.problems.LogRegProblem`).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .algorithm import AgentState, DOADPParams, active_update, consensus_terms, inactive_update
from .rng import activation_mask, agent_rng, draw_samples

EvalFn = Callable[[int, np.ndarray, np.ndarray], dict]
"""``evaluate(t, xbar, X) -> dict of scalars``."""


def _grads(problem, agents: np.ndarray, X: np.ndarray, idx: np.ndarray) -> np.ndarray:
    if hasattr(problem, "batched_grads"):
        return problem.batched_grads(agents, X, idx)
    return np.stack([problem.per_sample_grads(int(a), X[j], idx[j]) for j, a in enumerate(agents)])


def check_mixing(W: np.ndarray, atol: float = 1e-10) -> np.ndarray:
    """Validate a mixing matrix: square, symmetric, doubly stochastic, non-negative, connected."""
    W = np.asarray(W, dtype=np.float64)
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


class DOADPNetwork:
    """State of all n agents plus the (single, shared) public copies XHAT.

    Parameters
    ----------
    problem : object
        Gradient oracle (see module docstring).
    W : np.ndarray
        n x n symmetric doubly stochastic mixing matrix of a connected graph.
    x0 : np.ndarray
        Common initial model (d,).
    params : DOADPParams
        Hyperparameters (sigma already calibrated).
    public_copy : str
        ``"zero"`` (paper) or ``"x0"``.
    X0 : np.ndarray or None
        Optional distinct initial models (n, d) (consensus oracle).
    """

    def __init__(self, problem, W, x0, params: DOADPParams, public_copy: str = "zero", X0=None):
        self.problem = problem
        self.W = check_mixing(W)
        self.params = params
        n, d = self.W.shape[0], int(np.asarray(x0).shape[0])
        if n != problem.n:
            raise ValueError(f"W is {n}x{n} but the problem has n={problem.n} agents")
        params.check_dim(d)
        X0 = np.tile(np.asarray(x0, dtype=np.float64), (n, 1)) if X0 is None else np.asarray(X0, float)
        self.agents = [AgentState.initial(X0[i], public_copy) for i in range(n)]
        self.t = 0
        self.n, self.d = n, d
        self.values_sent = 0
        self.active_steps = 0
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

    def step(self) -> np.ndarray:
        """One synchronous iteration; returns the activation vector."""
        pr = self.params
        t = self.t
        eta = activation_mask(pr.seed, t, self.n, pr.p)
        cons = consensus_terms(self.W, self.XHAT, pr.gamma)
        act = np.flatnonzero(eta)
        rngs, idx = {}, []
        for i in act:
            rngs[i] = agent_rng(pr.seed, t, i)
            idx.append(draw_samples(rngs[i], self.problem.q, pr.batch_size))
        if len(act):
            t0 = time.perf_counter()
            X = np.stack([self.agents[i].x for i in act])
            grads = _grads(self.problem, act, X, np.stack(idx))
            self.grad_seconds += time.perf_counter() - t0
        for i in range(self.n):
            if eta[i]:
                j = int(np.searchsorted(act, i))
                active_update(self.agents[i], cons[i], pr, grads[j], rngs[i])
            else:
                inactive_update(self.agents[i], cons[i], pr)
        self.values_sent += len(act) * int(pr.k)
        self.active_steps += len(act)
        self.t += 1
        return eta


def run_doadp(
    problem,
    W: np.ndarray,
    x0: np.ndarray,
    params: DOADPParams,
    T: int,
    evaluate: EvalFn | None = None,
    eval_every: int = 100,
    public_copy: str = "zero",
) -> dict:
    """Run T iterations of DO-ADP; returns a history dict of lists (``t`` plus evaluate's keys)."""
    net = DOADPNetwork(problem, W, x0, params, public_copy=public_copy)
    hist: dict[str, list] = {"t": []}

    def record():
        if evaluate is None:
            return
        X = net.X
        out = evaluate(net.t, X.mean(axis=0), X)
        hist["t"].append(net.t)
        for key, val in out.items():
            hist.setdefault(key, []).append(val)

    record()
    t0 = time.perf_counter()
    for _ in range(T):
        net.step()
        if net.t % eval_every == 0 or net.t == T:
            record()
    hist["wall_s"] = time.perf_counter() - t0
    hist["comm_rate"] = net.values_sent / max(1, T * net.n * net.d)
    hist["xbar"] = net.X.mean(axis=0)
    return hist


def run_dmsgd(
    problem,
    W: np.ndarray,
    x0: np.ndarray,
    alpha: float,
    gamma: float,
    beta: float,
    T: int,
    seed: int = 0,
    batch_size: int = 1,
    G: float | None = None,
    clip_mode: str = "coordinate",
    evaluate: EvalFn | None = None,
    eval_every: int = 100,
) -> dict:
    """Non-private decentralized momentum SGD (eq. 2 of the paper), dense exchange every round.

    ``m <- g + beta m; x <- x - alpha m + gamma sum_j w_ij (x_j - x_i)``. Uses the same per-agent
    sample streams as DO-ADP, so DO-ADP with p=1, k=d, sigma=0 reproduces it (oracle 1).
    """
    from .clipping import clip_per_sample

    W = check_mixing(W)
    n = W.shape[0]
    X = np.tile(np.asarray(x0, dtype=np.float64), (n, 1))
    M = np.zeros_like(X)
    hist: dict[str, list] = {"t": []}
    agents = np.arange(n)

    def record(t):
        if evaluate is None:
            return
        out = evaluate(t, X.mean(axis=0), X)
        hist["t"].append(t)
        for key, val in out.items():
            hist.setdefault(key, []).append(val)

    record(0)
    for t in range(T):
        idx = np.stack([draw_samples(agent_rng(seed, t, i), problem.q, batch_size) for i in range(n)])
        grads = _grads(problem, agents, X, idx)
        g = np.stack([clip_per_sample(grads[i], G, clip_mode).mean(axis=0) for i in range(n)])
        cons = gamma * (W @ X - X)
        M = g + beta * M
        X = X - alpha * M + cons
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1)
    hist["comm_rate"] = 1.0
    hist["xbar"] = X.mean(axis=0)
    hist["X"] = X
    return hist
