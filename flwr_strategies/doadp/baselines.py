"""Baselines of Table I / Fig. 3 of Huo et al., as reconstructed in the spec (Sec. 6).

The paper describes each baseline in one sentence; the update rules here are the standard forms of
the cited works with the spec's [CHOICE] constants. Verify against the originals before claiming a
faithful reproduction.

* :func:`run_dpdo`: DPDO (Huang, Mitra, Vaidya 2015): broadcast ``x + Laplace(b_t)``, mix, full
  local gradient step with ``lam_t = c rs^t``; ``b_t = b0 rn^t``; pure eps-DP.
* :func:`run_dpdda`: DP-DDA (Liu, Johansson, Shi 2024): node sampling ``p_s``, Gaussian noise on a
  clipped one-sample gradient, dual averaging, every node transmits; (eps, delta)-DP through the
  DO-ADP chain with ``p = p_s``, ``k = d``.
* :func:`run_cpgt`: CPGT (Xie et al. 2023): compressed gradient tracking with Laplace perturbation
  of both transmitted variables, Top-k on each; pure eps-DP.

All runners take the problem interface of :mod:`.simulator`, and per-sample gradients are clipped
exactly as in DO-ADP (coordinate clip at G/sqrt(d)).
"""

from __future__ import annotations

import math

import numpy as np

from ..privacy.doadp_accountant import doadp_sigma
from ..privacy.laplace import geometric_laplace_scale
from .clipping import clip_per_sample
from .rng import agent_rng, draw_samples
from .simulator import EvalFn, _grads, check_mixing
from .sparsify import top_k

_BASELINE_TAG = {"dpdo": 11, "dpdda": 12, "cpgt": 13}


def _rng(name: str, seed: int, t: int) -> np.random.Generator:
    return np.random.default_rng([_BASELINE_TAG[name], int(seed), int(t)])


def _recorder(evaluate, hist):
    def record(t, X):
        if evaluate is None:
            return
        out = evaluate(t, X.mean(axis=0), X)
        hist["t"].append(t)
        for key, val in out.items():
            hist.setdefault(key, []).append(val)

    return record


def clipped_local_grads(problem, X: np.ndarray, G: float, clip_mode: str = "coordinate", ridge=True):
    """Full local gradients, each the mean of per-sample clipped gradients, for every agent."""
    out = np.empty_like(X)
    q = problem.q
    for i in range(X.shape[0]):
        g = problem.per_sample_grads(i, X[i], np.arange(q), ridge)
        out[i] = clip_per_sample(g, G, clip_mode).mean(axis=0)
    return out


# --------------------------------------------------------------------------------------- DPDO
def dpdo_noise_scale(epsilon: float, G: float, d: int, q: int, c: float, rs: float, rn: float) -> float:
    """Spec 6.1: ``b0 = 2 G sqrt(d) c / (q eps (rn - rs))`` (record-level, pure eps-DP)."""
    return geometric_laplace_scale(epsilon, 2.0 * G * math.sqrt(d) * c / q, rs, rn)


def run_dpdo(problem, W, x0, *, epsilon: float, T: int, c: float = 0.001, rs: float = 0.99,
             rn: float = 0.995, G: float = 1.0, seed: int = 0, evaluate: EvalFn | None = None,
             eval_every: int = 100) -> dict:
    """DPDO: ``y = x + Lap(b0 rn^t)``; ``z = W y``; ``x = z - c rs^t grad f_i(z)`` (X = R^d, no projection)."""
    W = check_mixing(W)
    n, d = W.shape[0], len(x0)
    b0 = dpdo_noise_scale(epsilon, G, d, problem.q, c, rs, rn)
    X = np.tile(np.asarray(x0, float), (n, 1))
    hist = {"t": [], "b0": b0}
    record = _recorder(evaluate, hist)
    record(0, X)
    for t in range(T):
        Y = X + _rng("dpdo", seed, t).laplace(0.0, b0 * rn**t, size=X.shape)
        Z = W @ Y
        X = Z - c * rs**t * clipped_local_grads(problem, Z, G)
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, X)
    hist["comm_rate"] = 1.0
    hist["xbar"] = X.mean(axis=0)
    return hist


# ------------------------------------------------------------------------------------- DP-DDA
def run_dpdda(problem, W, x0, *, epsilon: float, delta0: float, T: int, p_s: float = 0.24,
              beta0: float = 1000.0, G: float = 1.0, reg: float | None = None, rescale: bool = False,
              sigma: float | None = None, seed: int = 0, evaluate: EvalFn | None = None, eval_every: int = 100) -> dict:
    """DP-DDA with ``a_t = 1``, ``beta_t = beta0 sqrt(t+1)``, ``h(x) = reg ||x||^2 / 2``.

    ``reg`` defaults to 1/q (the logistic-regression ridge, which is then removed from the sampled
    gradient); ``x_i = -z_i / (A_t reg + beta_t)``. ``rescale=True`` divides the noisy gradient by
    ``p_s`` (unbiased variant; unclear in the paper, default off).
    """
    W = check_mixing(W)
    n, d, q = W.shape[0], len(x0), problem.q
    reg = 1.0 / q if reg is None else float(reg)
    ridge = reg == 0.0
    if sigma is None:  # calibrated with the DO-ADP chain at p = p_s, k = d
        sigma = doadp_sigma(epsilon, delta0, T, p_s, d, d, q, G, allow_low_p=True)
    X = np.tile(np.asarray(x0, float), (n, 1))
    Z = np.zeros_like(X)
    hist = {"t": [], "sigma": sigma}
    record = _recorder(evaluate, hist)
    record(0, X)
    for t in range(T):
        sampled = _rng("dpdda", seed, t).random(n) < p_s
        Gt = np.zeros_like(X)
        for i in np.flatnonzero(sampled):
            rng = agent_rng(seed, t, i)
            idx = draw_samples(rng, q, 1)
            g = clip_per_sample(problem.per_sample_grads(i, X[i], idx, ridge), G).mean(axis=0)
            g = g + rng.normal(0.0, sigma, size=d)
            Gt[i] = g / p_s if rescale else g
        Z = W @ Z + Gt
        A_t = t + 1.0
        X = -Z / (A_t * reg + beta0 * math.sqrt(t + 1.0))
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, X)
    hist["comm_rate"] = 1.0
    hist["xbar"] = X.mean(axis=0)
    return hist


# --------------------------------------------------------------------------------------- CPGT
def cpgt_noise_scale(epsilon: float, G: float, d: int, q: int, lr: float, rs: float, rn: float) -> float:
    """Laplace b0 per variable: half the budget each for x and y, ``s0 = 2 G sqrt(d) lr / q``.

    [CHOICE, heuristic] The per-round L1 sensitivity of both released variables is taken as the
    record's contribution to a step, ``2 G sqrt(d) lr_t / q`` with ``lr_t = lr rs^t``, as DPDO.
    """
    return geometric_laplace_scale(epsilon / 2.0, 2.0 * G * math.sqrt(d) * lr / q, rs, rn)


def run_cpgt(problem, W, x0, *, epsilon: float, T: int, k: int, lr: float = 0.001, a: float = 0.5,
             g_cons: float = 0.05, rs: float = 0.999, rn: float = 0.9995, G: float = 1.0,
             seed: int = 0, evaluate: EvalFn | None = None, eval_every: int = 100) -> dict:
    """CPGT: compressed gradient tracking (C-GT) with Laplace noise before Top-k, both variables.

    Stochastic one-sample gradients (the same sample for both evaluations of a round), step size
    ``lr rs^t``, noise ``b0 rn^t``.
    """
    W = check_mixing(W)
    n, d, q = W.shape[0], len(x0), problem.q
    b0 = cpgt_noise_scale(epsilon, G, d, q, lr, rs, rn)
    X = np.tile(np.asarray(x0, float), (n, 1))
    agents = np.arange(n)

    def sgrad(Xm, t):
        idx = np.stack([draw_samples(agent_rng(seed, t, i), q, 1) for i in range(n)])
        g = _grads(problem, agents, Xm, idx)
        return np.stack([clip_per_sample(g[i], G).mean(axis=0) for i in range(n)])

    Y = clipped_local_grads(problem, X, G)  # y_i(0) = grad f_i(x_i(0))
    H = {"x": np.zeros_like(X), "y": np.zeros_like(X)}
    HW = {"x": np.zeros_like(X), "y": np.zeros_like(X)}
    hist = {"t": [], "b0": b0}
    record = _recorder(evaluate, hist)
    record(0, X)
    for t in range(T):
        rng = _rng("cpgt", seed, t)
        hat, hatw = {}, {}
        for name, V in (("x", X), ("y", Y)):
            Vt = V + rng.laplace(0.0, b0 * rn**t, size=V.shape)
            Q = np.zeros_like(V)
            for i in range(n):
                ind, val = top_k(Vt[i] - H[name][i], k)
                Q[i, ind] = val
            hat[name] = H[name] + Q
            hatw[name] = HW[name] + W @ Q
            H[name] = (1 - a) * H[name] + a * hat[name]
            HW[name] = (1 - a) * HW[name] + a * hatw[name]
        lr_t = lr * rs**t
        X_new = X - g_cons * (hat["x"] - hatw["x"]) - lr_t * Y
        Y = Y - g_cons * (hat["y"] - hatw["y"]) + sgrad(X_new, t) - sgrad(X, t)
        X = X_new
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, X)
    hist["comm_rate"] = 2.0 * k / d
    hist["xbar"] = X.mean(axis=0)
    return hist
