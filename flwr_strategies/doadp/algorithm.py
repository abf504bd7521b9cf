"""Algorithm 1 of DO-ADP (Huo et al.), one agent's side, framework neutral (NumPy in / NumPy out).

One iteration t for agent i, given its consensus term ``cons_i = gamma * sum_j w_ij (xhat_j - xhat_i)``
(computed from the time-t public copies by whoever emulates the network):

* the agent flips its private coin eta ~ Bernoulli(p);
* active: draw the batch from its q records (:func:`.rng.draw_batch`), clip each per-sample gradient,
  sum and divide by b, add ``N(0, sigma^2 I_d)`` on all coordinates, ``m <- g + theta + beta m``,
  ``x <- x - alpha m + cons``, message ``s = TopK_k(x_new - xhat)`` (k values + k indices),
  ``xhat <- xhat + s``;
* inactive: ``m <- beta m``, ``x <- x + cons``; no message, xhat unchanged.

:func:`agent_round` is a pure function: it returns the agent's next state and leaves the given one
untouched, so a client commits its state only once its reply exists (a client that fails mid-round
keeps its time-t state and the public copies stay consistent). The previous message stays
*pending* until the server's count of applied messages confirms it (:func:`reconcile`); a message
the server rejected or never received is rolled back exactly from the saved old values.

The same :func:`agent_round` runs in the Flower client and in the reference simulator
(:mod:`.simulator`), so both give the same trajectory for the same client seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.validation import check_choice, check_integer, check_number
from ..privacy.accountant import SAMPLINGS
from .clipping import clip_per_sample
from .config import MSG_DTYPES
from .rng import activation_coin, draw_batch
from .sparsify import top_k

__all__ = [
    "DOADPParams",
    "AgentState",
    "StepResult",
    "GradFn",
    "noisy_gradient",
    "agent_round",
    "reconcile",
    "consensus_terms",
    "index_dtype_for",
]

GradFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``grad_fn(x, sample_indices) -> per-sample gradients of shape (len(indices), d)`` for one agent."""


@dataclass(frozen=True)
class DOADPParams:
    """What one agent needs for one iteration (sent by the server every round).

    Parameters
    ----------
    alpha : float
        SGD step size, >= 0 (paper: 0.01 CNN, 0.001 logistic regression).
    beta : float
        Momentum factor in [0, 1) (paper: 0.15).
    p : float
        Activation probability in (0, 1].
    k : int
        Top-k coordinates per message, 1 <= k <= d.
    sigma : float
        Noise std per coordinate, >= 0 (0 only for the non-private D-mSGD).
    clip : float | None
        Clip bound G (> 0); None disables clipping (D-mSGD only).
    clip_mode : str
        ``"coordinate"`` (|g_j| <= G/sqrt(d)) or ``"l2"``.
    batch_size : int
        b: batch size (uniform) or expected batch size and divisor (poisson), >= 1.
    sampling : str
        ``"uniform"`` or ``"poisson"`` (:func:`.rng.draw_batch`).
    msg_dtype : str
        dtype of the transmitted values (both ends apply the rounded values).
    """

    alpha: float = 0.01
    beta: float = 0.15
    p: float = 1.0
    k: int = 1
    sigma: float = 0.0
    clip: float | None = 1.0
    clip_mode: str = "coordinate"
    batch_size: int = 1
    sampling: str = "uniform"
    msg_dtype: str = "float64"

    def __post_init__(self) -> None:
        check_number("alpha", self.alpha, "finite and >= 0", lambda v: v >= 0)
        check_number("beta", self.beta, "in [0, 1)", lambda v: 0 <= v < 1)
        check_number("p", self.p, "in (0, 1]", lambda v: 0 < v <= 1)
        check_integer("k", self.k, 1)
        check_number("sigma", self.sigma, "finite and >= 0", lambda v: v >= 0)
        if self.clip is not None:
            check_number("clip", self.clip, "positive and finite or None", lambda v: v > 0)
        check_integer("batch_size", self.batch_size, 1)
        check_choice("sampling", self.sampling, SAMPLINGS)
        check_choice("msg_dtype", self.msg_dtype, MSG_DTYPES)

    @property
    def private(self) -> bool:
        """True when every active step is clipped and noised."""
        return self.clip is not None and self.sigma > 0

    def check_dim(self, d: int) -> None:
        if not 1 <= int(self.k) <= int(d):
            raise ValueError(f"k must lie in [1, d] = [1, {d}], got k={self.k!r}")


@dataclass
class AgentState:
    """One agent's private state (float64 vectors of length d).

    ``x`` model, ``m`` momentum, ``xhat`` its own public copy (including the pending message),
    ``sent`` messages produced so far, ``pending_idx``/``pending_old``: indices of the last message
    and the public-copy values before it (to roll it back if the server did not apply it).
    """

    x: np.ndarray
    m: np.ndarray
    xhat: np.ndarray
    sent: int = 0
    pending_idx: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pending_old: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))

    @classmethod
    def initial(cls, x0: np.ndarray, public_copy: str = "zero") -> "AgentState":
        """x = x0, m = 0, xhat = 0 (the paper) or x0 (``public_copy="x0"``; x0 is public)."""
        x0 = np.array(x0, dtype=np.float64, copy=True).reshape(-1)
        if public_copy not in ("zero", "x0"):
            raise ValueError(f"public_copy must be 'zero' or 'x0', got public_copy={public_copy!r}")
        xhat = np.zeros_like(x0) if public_copy == "zero" else x0.copy()
        return cls(x=x0, m=np.zeros_like(x0), xhat=xhat)

    def copy(self) -> "AgentState":
        return AgentState(self.x.copy(), self.m.copy(), self.xhat.copy(), int(self.sent),
                          self.pending_idx.copy(), self.pending_old.copy())

    def to_arrays(self) -> list[np.ndarray]:
        """``[x, m, xhat, [sent], pending_idx, pending_old]`` (for ``context.state``)."""
        return [self.x, self.m, self.xhat, np.array([self.sent], dtype=np.int64), self.pending_idx, self.pending_old]

    @classmethod
    def from_arrays(cls, arrays: list[np.ndarray]) -> "AgentState":
        x, m, xhat, sent, idx, old = arrays
        return cls(np.asarray(x, np.float64).copy(), np.asarray(m, np.float64).copy(),
                   np.asarray(xhat, np.float64).copy(), int(np.asarray(sent).reshape(-1)[0]),
                   np.asarray(idx, np.int64).copy(), np.asarray(old, np.float64).copy())


@dataclass
class StepResult:
    """What one agent round produced: the sparse message (None if inactive) and diagnostics.

    ``noise`` and ``grad`` (the clipped batch gradient before noise) never leave the client; they
    are returned for tests and the reference simulator.
    """

    active: bool
    indices: np.ndarray | None = None
    values: np.ndarray | None = None
    noise: np.ndarray | None = None
    grad: np.ndarray | None = None
    batch: np.ndarray | None = None


def consensus_terms(W, XHAT: np.ndarray, gamma: float) -> np.ndarray:
    """``gamma * (W XHAT - XHAT)``: row i is ``gamma * sum_j w_ij (xhat_j - xhat_i)`` (rows of W sum to 1)."""
    return gamma * (W @ XHAT - XHAT)


def noisy_gradient(per_sample_grads: np.ndarray, params: DOADPParams, rng: np.random.Generator,
                   d: int) -> tuple[np.ndarray, np.ndarray]:
    """Clip per sample, sum, divide by b, add ``N(0, sigma^2 I_d)``: ``(g_clipped, noise)``.

    An empty batch (possible with Poisson sampling) gives ``g = 0`` and still draws the noise.
    """
    grads = np.asarray(per_sample_grads, dtype=np.float64).reshape(-1, d)
    g = clip_per_sample(grads, params.clip, params.clip_mode).sum(axis=0) / float(params.batch_size)
    noise = rng.normal(0.0, params.sigma, size=d) if params.sigma > 0 else np.zeros(d)
    return g, noise


def reconcile(state: AgentState, accepted: int) -> AgentState:
    """Align the agent's own public copy with the server's count of applied messages.

    ``accepted == state.sent``: the last message was applied (pending cleared).
    ``accepted == state.sent - 1``: it was not (rejected or lost); it is rolled back exactly.
    Anything else means the two copies diverged and raises ``ValueError``.
    """
    accepted = int(accepted)
    if accepted == state.sent and state.pending_idx.size == 0:
        return state
    if not (accepted == state.sent or (accepted == state.sent - 1 and state.pending_idx.size)):
        raise ValueError(
            f"public copy out of sync: the server applied {accepted} messages, this agent sent {state.sent}"
        )
    out = state.copy()
    if accepted < state.sent:  # not applied: roll the pending message back
        out.xhat[out.pending_idx] = out.pending_old
        out.sent -= 1
    out.pending_idx = np.empty(0, dtype=np.int64)
    out.pending_old = np.empty(0, dtype=np.float64)
    return out


def agent_round(
    state: AgentState,
    cons: np.ndarray,
    params: DOADPParams,
    rng: np.random.Generator,
    grad_fn: GradFn,
    q: int,
) -> tuple[AgentState, StepResult]:
    """One iteration of Algorithm 1 for one agent; returns ``(next_state, result)``.

    Parameters
    ----------
    state : AgentState
        The agent's time-t state (not modified; call :func:`reconcile` first).
    cons : np.ndarray
        Consensus term from the time-t public copies (length d).
    params : DOADPParams
        This round's hyperparameters.
    rng : np.random.Generator
        The agent's private generator for this round (:func:`.rng.agent_generator`); draws the coin,
        then the batch, then the noise.
    grad_fn : callable
        ``grad_fn(x, idx) -> (len(idx), d)`` per-sample gradients at x.
    q : int
        Local dataset size.
    """
    d = state.x.shape[0]
    params.check_dim(d)
    cons = np.asarray(cons, dtype=np.float64).reshape(-1)
    if cons.shape[0] != d:
        raise ValueError(f"consensus term has length {cons.shape[0]}, the model has d={d}")
    nxt = state.copy()
    if not activation_coin(rng, params.p):
        nxt.m *= params.beta
        nxt.x += cons
        return nxt, StepResult(False)
    idx = draw_batch(rng, q, params.batch_size, params.sampling)
    grads = grad_fn(state.x, idx) if idx.size else np.zeros((0, d))
    g, noise = noisy_gradient(grads, params, rng, d)
    nxt.m = g + noise + params.beta * state.m
    nxt.x = state.x - params.alpha * nxt.m + cons
    ind, val = top_k(nxt.x - state.xhat, int(params.k))
    val = val.astype(params.msg_dtype).astype(np.float64)
    nxt.pending_idx = ind
    nxt.pending_old = state.xhat[ind].copy()
    nxt.xhat[ind] += val
    nxt.sent = state.sent + 1
    return nxt, StepResult(True, ind, val, noise, g, idx)


def index_dtype_for(d: int):
    """Smallest unsigned integer dtype that can hold indices of a d-vector (for the wire format)."""
    return np.uint16 if d <= 2**16 else (np.uint32 if d <= 2**32 else np.uint64)
