"""Algorithm 1 of DO-ADP (Huo et al.), framework neutral (NumPy in / NumPy out).

One iteration t for agent i, given its consensus term ``cons_i = gamma * sum_j w_ij (xhat_j - xhat_i)``
(computed from time-t public copies by whoever emulates the network):

* active (prob. p): draw ``b`` samples uniformly, clip each per-sample gradient, average, add
  ``N(0, sigma^2 I_d)`` on all coordinates, ``m <- g + theta + beta m``, ``x <- x - alpha m + cons``,
  message ``s = TopK_k(x_new - xhat)`` (k values + indices), ``xhat <- xhat + s``;
* inactive: ``m <- beta m``, ``x <- x + cons``, no message, ``xhat`` unchanged.

The same :func:`agent_step` is used by the Flower client and by the reference simulator, so both
produce the same trajectory for the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..privacy.validation import check_activation, check_clip, check_nonneg
from .clipping import CLIP_MODES, clip_per_sample
from .rng import agent_rng, draw_samples
from .sparsify import top_k

GradFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``grad_fn(x, sample_indices) -> per-sample gradients of shape (b, d)`` for one agent."""


@dataclass(frozen=True)
class DOADPParams:
    """Hyperparameters of DO-ADP.

    Parameters
    ----------
    alpha : float
        SGD step size (>= 0). Paper: 0.001 (logistic regression), 0.01 (CNN).
    gamma : float
        Consensus step size (>= 0). Paper: 0.05. Theory value: :func:`theory.gamma_theory`.
    beta : float
        Momentum factor in [0, 1). Paper: 0.15.
    p : float
        Activation probability in [1/2, 1] (``allow_low_p`` accepts (0, 1)). Paper: 0.8 or 1.
    k : int
        Top-k coordinates per message, 1 <= k <= d (checked against d at use).
    sigma : float
        Noise std per coordinate (>= 0; 0 disables noise). Calibrate with
        :func:`flwr_strategies.privacy.doadp_sigma`.
    G : float or None
        Clip bound (> 0); None disables clipping (non-private runs only).
    clip_mode : str
        ``"coordinate"`` (default, per coordinate at G/sqrt(d)) or ``"l2"``.
    batch_size : int
        Samples per active step (default 1, the paper).
    msg_dtype : str
        dtype of the transmitted values (``"float64"`` default; ``"float32"`` halves the bytes).
        Both ends apply the same rounded values, so public copies stay identical.
    seed : int
        Seed of every random stream.
    """

    alpha: float = 0.001
    gamma: float = 0.05
    beta: float = 0.15
    p: float = 1.0
    k: int = 1
    sigma: float = 0.0
    G: float | None = 1.0
    clip_mode: str = "coordinate"
    batch_size: int = 1
    msg_dtype: str = "float64"
    seed: int = 0
    allow_low_p: bool = False

    def __post_init__(self):
        check_nonneg(self.alpha, "alpha")
        check_nonneg(self.gamma, "gamma")
        if not 0.0 <= float(self.beta) < 1.0:
            raise ValueError(f"beta must lie in [0, 1), got beta={self.beta!r}")
        check_activation(self.p, allow_low_p=self.allow_low_p)
        if int(self.k) < 1:
            raise ValueError(f"k must be >= 1, got k={self.k!r}")
        check_nonneg(self.sigma, "sigma")
        if self.G is not None:
            check_clip(self.G, name="G")
        if self.clip_mode not in CLIP_MODES:
            raise ValueError(f"clip_mode must be one of {CLIP_MODES}, got clip_mode={self.clip_mode!r}")
        if int(self.batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got batch_size={self.batch_size!r}")
        if self.msg_dtype not in ("float64", "float32"):
            raise ValueError(f"msg_dtype must be 'float64' or 'float32', got {self.msg_dtype!r}")

    def check_dim(self, d: int) -> None:
        if not 1 <= int(self.k) <= int(d):
            raise ValueError(f"k must lie in [1, d] = [1, {d}], got k={self.k!r}")


@dataclass
class AgentState:
    """Private state of one agent: model x, momentum m and its own public copy xhat (all float64)."""

    x: np.ndarray
    m: np.ndarray
    xhat: np.ndarray

    @classmethod
    def initial(cls, x0: np.ndarray, public_copy: str = "zero") -> "AgentState":
        """x = x0, m = 0, xhat = 0 (the paper) or x0 (``public_copy="x0"``, x0 public)."""
        x0 = np.asarray(x0, dtype=np.float64)
        if public_copy not in ("zero", "x0"):
            raise ValueError(f"public_copy must be 'zero' or 'x0', got {public_copy!r}")
        xhat = np.zeros_like(x0) if public_copy == "zero" else x0.copy()
        return cls(x=x0.copy(), m=np.zeros_like(x0), xhat=xhat)


@dataclass
class StepResult:
    """What one agent step produced: the sparse message (None if inactive) and diagnostics."""

    indices: np.ndarray | None
    values: np.ndarray | None
    noise: np.ndarray | None
    grad: np.ndarray | None


def consensus_terms(W: np.ndarray, XHAT: np.ndarray, gamma: float) -> np.ndarray:
    """``gamma * (W XHAT - XHAT)``: row i is ``gamma * sum_j w_ij (xhat_j - xhat_i)`` (rows of W sum to 1)."""
    return gamma * (W @ XHAT - XHAT)


def noisy_gradient(
    per_sample_grads: np.ndarray, params: DOADPParams, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Clip per sample, average, add ``N(0, sigma^2 I_d)``; returns ``(g_clipped_mean, noise)``."""
    g = clip_per_sample(per_sample_grads, params.G, params.clip_mode)
    g = g.reshape(-1, g.shape[-1]).mean(axis=0)
    if params.sigma > 0:
        noise = rng.normal(0.0, params.sigma, size=g.shape[0])
    else:
        noise = np.zeros_like(g)
    return g, noise


def inactive_update(state: AgentState, cons: np.ndarray, params: DOADPParams) -> StepResult:
    """Inactive agent: ``m <- beta m``, ``x <- x + cons``; nothing is sent, xhat unchanged."""
    state.m *= params.beta
    state.x += cons
    return StepResult(None, None, None, None)


def active_update(
    state: AgentState,
    cons: np.ndarray,
    params: DOADPParams,
    per_sample_grads: np.ndarray,
    rng: np.random.Generator,
) -> StepResult:
    """Active agent, given its per-sample gradients at x_t and its stream (after the sample draw)."""
    g, noise = noisy_gradient(per_sample_grads, params, rng)
    state.m = g + noise + params.beta * state.m
    state.x = state.x - params.alpha * state.m + cons
    ind, val = top_k(state.x - state.xhat, int(params.k))
    val = val.astype(params.msg_dtype).astype(np.float64)
    state.xhat[ind] += val
    return StepResult(ind, val, noise, g)


def agent_step(
    state: AgentState,
    cons: np.ndarray,
    active: bool,
    params: DOADPParams,
    grad_fn: GradFn,
    q: int,
    t: int,
    agent: int,
) -> StepResult:
    """Apply one iteration of Algorithm 1 to ``state`` in place.

    Parameters
    ----------
    state : AgentState
        Agent i's x, m, xhat at time t (updated in place to time t+1).
    cons : np.ndarray
        Consensus term from time-t public copies.
    active : bool
        Activation coin eta_{i,t}.
    params : DOADPParams
        Hyperparameters.
    grad_fn : callable
        ``grad_fn(x, idx) -> (b, d)`` per-sample gradients at x.
    q : int
        Local dataset size (samples are drawn uniformly from range(q), with replacement).
    t, agent : int
        Iteration and agent index (select the random stream :func:`rng.agent_rng`).
    """
    params.check_dim(state.x.shape[0])
    if not active:
        return inactive_update(state, cons, params)
    rng = agent_rng(params.seed, t, agent)
    idx = draw_samples(rng, q, params.batch_size)
    return active_update(state, cons, params, grad_fn(state.x, idx), rng)


def message_nbytes(k: int, msg_dtype: str = "float64", index_dtype=np.int64) -> int:
    """Bytes of one Top-k message: k values plus k indices."""
    return int(k) * (np.dtype(msg_dtype).itemsize + np.dtype(index_dtype).itemsize)


def index_dtype_for(d: int):
    """Smallest unsigned integer dtype that can hold indices of a d-vector (for wire format)."""
    return np.uint16 if d <= 2**16 else (np.uint32 if d <= 2**32 else np.uint64)
