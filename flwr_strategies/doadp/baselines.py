"""Baselines of Table I / Fig. 3 of Huo et al. (DPDO, DP-DDA, CPGT): one agent's round, and
reference simulators of the whole network (NumPy; framework neutral).

The paper describes each baseline in one sentence (Sec. V-A); the update rules are the standard
forms of the cited works, with the project's constants where the paper gives none. All of them use the
same per-sample clipped minibatch gradient as DO-ADP (batch b drawn from the agent's private
generator), so they can be compared at the same batch size.

Each method runs *pipelined* on Flower: in round r (t = r - 1) an agent first completes iteration
t - 1 with what its neighbours broadcast in round r - 1 (relayed by the server), then broadcasts
for iteration t. The reference simulators here run the same per-agent functions in the same order,
with the same per-agent generators, so they equal the Flower path for the same client seeds.

* DPDO (Huang, Mitra, Vaidya 2015): ``x_t = z_{t-1} - c rs^{t-1} g(z_{t-1})``, broadcast
  ``y_t = x_t + Laplace(b0 rn^t)``, ``z_t = sum_j w_ij y_j``. Pure eps-DP: given the public z, y_t
  is a Laplace mechanism on one clipped minibatch mean (L1 sensitivity ``2 G sqrt(d) c rs^{t-1} / b``),
  amplified by the uniform batch draw and composed (certified, :mod:`flwr_strategies.privacy.laplace`).
* DP-DDA (Liu, Johansson, Shi 2024): sampled with probability p_s, an agent adds
  ``gtil = g(x_t) + N(0, sigma^2)`` (else 0) to ``z = sum_j w_ij z_j``, then
  ``x = -z / (A_t reg + beta0 sqrt(t+1))`` (a_t = 1). Every agent broadcasts z. Certified by the
  same standard accountant as DO-ADP; no credit for p_s (a non-sampled agent adds exactly 0, which
  an observer of consecutive z's sees).
* CPGT (Xie et al. 2023): compressed gradient tracking; both x and the tracker y are perturbed with
  Laplace noise, Top-k compressed against references h (CHOCO-style), and mixed. Its epsilon is a
  heuristic (the tracker accumulates every past gradient, so its per-release sensitivity is not
  bounded by one step's): NOT certified.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .algorithm import GradFn
from .clipping import clip_per_sample
from .rng import agent_generator, draw_batch
from .simulator import EvalFn, _network, _recorder
from .sparsify import top_k

__all__ = [
    "BatchGrad",
    "clipped_batch_gradient",
    "laplace_schedule",
    "dpdo_round",
    "dpdda_round",
    "cpgt_round",
    "run_dpdo",
    "run_dpdda",
    "run_cpgt",
]


@dataclass(frozen=True)
class BatchGrad:
    """How an agent computes its clipped minibatch gradient: b records (``sampling``), per-sample
    clip ``clip`` (``clip_mode``), sum divided by b."""

    batch_size: int = 1
    clip: float = 1.0
    clip_mode: str = "coordinate"
    sampling: str = "uniform"


def clipped_batch_gradient(x: np.ndarray, rng: np.random.Generator, grad_fn: GradFn, q: int, bg: BatchGrad,
                           idx: np.ndarray | None = None) -> np.ndarray:
    """Draw the batch from ``rng`` (or take the drawn ``idx``: CPGT evaluates two points on one batch) and
    return ``sum_j clip(grad l(x; z_j)) / b``."""
    idx = draw_batch(rng, q, bg.batch_size, bg.sampling) if idx is None else idx
    d = x.shape[0]
    grads = grad_fn(x, idx) if idx.size else np.zeros((0, d))
    return clip_per_sample(np.asarray(grads, np.float64).reshape(-1, d), bg.clip, bg.clip_mode).sum(axis=0) / bg.batch_size


def laplace_schedule(clip: float, d: int, lr: float, rs: float, rn: float, batch_size: int, rounds: int,
                     delay: int) -> tuple[np.ndarray, np.ndarray]:
    """DPDO's and CPGT's releases ``t = delay, ..., rounds - 1``: the L1 sensitivity
    ``2 G sqrt(d) lr rs^(t - delay) / b`` of each (one clipped minibatch mean step) and its noise decay
    ``rn^t`` (the Laplace scale is ``b0 rn^t``). DPDO's round t releases the broadcast of t - 1
    data-dependent steps (``delay=1``); CPGT's releases its step t (``delay=0``). The servers calibrate
    b0 and the clients check it on this one schedule."""
    t = np.arange(delay, rounds, dtype=np.float64)
    return 2.0 * clip * math.sqrt(d) * lr * rs ** (t - delay) / batch_size, rn**t


# ----------------------------------------------------------------------------------- DPDO
def dpdo_round(x: np.ndarray, z: np.ndarray | None, t: int, *, c: float, rs: float, b0: float, rn: float,
               rng: np.random.Generator, grad_fn: GradFn, q: int, bg: BatchGrad) -> tuple[np.ndarray, np.ndarray]:
    """DPDO agent, round t: complete iteration t-1 from the mixed broadcasts ``z`` (None in the
    agent's first round, which starts from ``x``), then broadcast. Returns ``(x_t, y_t)``."""
    if z is not None:
        g = clipped_batch_gradient(z, rng, grad_fn, q, bg)
        x = z - c * rs ** (t - 1) * g
    y = x + rng.laplace(0.0, b0 * rn**t, size=x.shape[0])
    return x, y


# ----------------------------------------------------------------------------------- DP-DDA
def dpdda_round(x: np.ndarray, mixed: np.ndarray, t: int, *, p_s: float, sigma: float, reg: float, beta0: float,
                rng: np.random.Generator, grad_fn: GradFn, q: int, bg: BatchGrad) -> tuple[np.ndarray, np.ndarray, bool]:
    """DP-DDA agent, round t: ``z = mixed + gtil``; ``x = -z / ((t+1) reg + beta0 sqrt(t+1))``.
    Returns ``(x_{t+1}, z_t, sampled)``."""
    sampled = bool(rng.random() < p_s)
    z = np.array(mixed, dtype=np.float64, copy=True)
    if sampled:
        g = clipped_batch_gradient(x, rng, grad_fn, q, bg)
        z += g + rng.normal(0.0, sigma, size=x.shape[0])
    x_new = -z / ((t + 1.0) * reg + beta0 * math.sqrt(t + 1.0))
    return x_new, z, sampled


# ----------------------------------------------------------------------------------- CPGT
def cpgt_round(x: np.ndarray, y: np.ndarray | None, completion: tuple | None, h_x: np.ndarray, h_y: np.ndarray,
               t: int, *, k: int, lr: float, rs: float, g_cons: float, b0: float, rn: float,
               rng: np.random.Generator, grad_fn: GradFn, q: int, bg: BatchGrad, msg_dtype: str = "float64"):
    """CPGT agent, round t. ``y=None``: the agent's first round (``y = g(x)``); otherwise it first
    completes iteration t-1 with ``completion = (hat_x, hatw_x, hat_y, hatw_y)``. Returns
    ``(x, y, (idx_x, val_x), (idx_y, val_y))``."""
    if y is None:  # first round of this agent: the tracker starts at its own gradient
        y = clipped_batch_gradient(x, rng, grad_fn, q, bg)
    elif completion is not None:
        hat_x, hatw_x, hat_y, hatw_y = completion
        idx = draw_batch(rng, q, bg.batch_size, bg.sampling)
        x_new = x - g_cons * (hat_x - hatw_x) - lr * rs ** (t - 1) * y
        y = (y - g_cons * (hat_y - hatw_y) + clipped_batch_gradient(x_new, rng, grad_fn, q, bg, idx)
             - clipped_batch_gradient(x, rng, grad_fn, q, bg, idx))
        x = x_new
    scale = b0 * rn**t
    msgs = []
    for v, h in ((x, h_x), (y, h_y)):
        vt = v + rng.laplace(0.0, scale, size=v.shape[0])
        ind, val = top_k(vt - h, k)
        msgs.append((ind, val.astype(msg_dtype).astype(np.float64)))
    return x, y, msgs[0], msgs[1]


def cpgt_mix(W, H: np.ndarray, Q: np.ndarray, a: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Server side of one CPGT variable: ``hat = H + Q``, ``hatw = W hat``, ``H' = (1-a) H + a hat``."""
    hat = H + Q
    hatw = W @ hat
    return hat, hatw, (1.0 - a) * H + a * hat


# ----------------------------------------------------------------------------------- references
def run_dpdo(problem, W, x0, *, b0: float, c: float, T: int, rs: float = 0.99, rn: float = 0.995,
             bg: BatchGrad = BatchGrad(), client_seeds=None, evaluate: EvalFn | None = None,
             eval_every: int = 100) -> dict:
    """T rounds of pipelined DPDO; records ``evaluate(t, mean(Y), X)`` (the public average of the
    broadcasts) after rounds ``eval_every, 2 eval_every, ..., T``."""
    W, seeds, fns, X = _network(problem, W, x0, client_seeds)
    Y = np.zeros_like(X)
    hist, record = _recorder(evaluate, b0=b0)
    t0 = time.perf_counter()
    for t in range(T):
        Z = W @ Y
        for i in range(len(X)):
            X[i], Y[i] = dpdo_round(X[i], Z[i] if t else None, t, c=c, rs=rs, b0=b0, rn=rn,
                                    rng=agent_generator(seeds[i], t), grad_fn=fns[i], q=problem.q, bg=bg)
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, Y.mean(axis=0), X)
    hist.update(comm_rate=1.0, xbar=X.mean(axis=0), public=Y.mean(axis=0), X=X, Y=Y, wall_s=time.perf_counter() - t0)
    return hist


def run_dpdda(problem, W, x0, *, sigma: float, T: int, p_s: float = 0.24, beta0: float = 100.0,
              reg: float | None = None, bg: BatchGrad = BatchGrad(), client_seeds=None,
              evaluate: EvalFn | None = None, eval_every: int = 100) -> dict:
    """T rounds of DP-DDA (``reg`` defaults to 1/q); records ``evaluate(t, mean(X), X)``."""
    W, seeds, fns, X = _network(problem, W, x0, client_seeds)
    reg = 1.0 / problem.q if reg is None else float(reg)
    Z = np.zeros_like(X)
    hist, record = _recorder(evaluate, sigma=sigma)
    sampled = 0
    t0 = time.perf_counter()
    for t in range(T):
        M = W @ Z
        for i in range(len(X)):
            X[i], Z[i], s = dpdda_round(X[i], M[i], t, p_s=p_s, sigma=sigma, reg=reg, beta0=beta0,
                                        rng=agent_generator(seeds[i], t), grad_fn=fns[i], q=problem.q, bg=bg)
            sampled += s
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, X.mean(axis=0), X)
    hist.update(comm_rate=1.0, xbar=X.mean(axis=0), X=X, Z=Z, sampled=sampled, wall_s=time.perf_counter() - t0)
    return hist


def run_cpgt(problem, W, x0, *, b0: float, k: int, lr: float, T: int, a: float = 0.5, g_cons: float = 0.05,
             rs: float = 0.999, rn: float = 0.9995, bg: BatchGrad = BatchGrad(), client_seeds=None,
             evaluate: EvalFn | None = None, eval_every: int = 100, msg_dtype: str = "float64") -> dict:
    """T rounds of pipelined CPGT; records ``evaluate(t, mean(H_x), X)`` (the public references)."""
    W, seeds, fns, X = _network(problem, W, x0, client_seeds)
    n, d = X.shape
    Yv: list = [None] * n
    H = {"x": np.zeros_like(X), "y": np.zeros_like(X)}
    comp = None
    hist, record = _recorder(evaluate, b0=b0)
    t0 = time.perf_counter()
    for t in range(T):
        Q = {"x": np.zeros_like(X), "y": np.zeros_like(X)}
        for i in range(n):
            ci = None if comp is None else tuple(c[i] for c in comp)
            X[i], Yv[i], (ix, vx), (iy, vy) = cpgt_round(
                X[i], Yv[i], ci, H["x"][i], H["y"][i], t, k=k, lr=lr, rs=rs, g_cons=g_cons, b0=b0, rn=rn,
                rng=agent_generator(seeds[i], t), grad_fn=fns[i], q=problem.q, bg=bg, msg_dtype=msg_dtype)
            Q["x"][i, ix] = vx
            Q["y"][i, iy] = vy
        hx, hwx, H["x"] = cpgt_mix(W, H["x"], Q["x"], a)
        hy, hwy, H["y"] = cpgt_mix(W, H["y"], Q["y"], a)
        comp = (hx, hwx, hy, hwy)
        if (t + 1) % eval_every == 0 or t + 1 == T:
            record(t + 1, H["x"].mean(axis=0), X)
    hist.update(comm_rate=2.0 * k / d, xbar=X.mean(axis=0), public=H["x"].mean(axis=0), X=X, H=H,
                wall_s=time.perf_counter() - t0)
    return hist
