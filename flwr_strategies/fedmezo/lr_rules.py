"""Personalised learning rates for FedMeZO (paper Proposition 3.7, Fig. 4).

Each client ``i`` gets ``eta_i = eta0 + alpha * Phi_i`` where ``Phi_i`` in [-1, 1] is a
heterogeneity index estimated online on the server::

    dev_i = s_i - mean_j s_j;     Phi_i = dev_i / max_j |dev_j|   (0 when all equal or non-finite)

A client with a larger signal (higher loss, larger update deviation) gets a *larger* rate. The
reference implementation adds ``alpha = 5e-6`` to ``eta0 = 1e-5``; this is the paper's
``eta0 * (1 + alpha_rel * Phi)`` with ``alpha_rel = 0.5``.

Signals (``strategy``):

- ``"frozen"``: no personalisation (``eta0`` for all).
- ``"random"``: ``eta_i ~ Uniform[eta0 - alpha, eta0 + alpha]``, seeded per round.
- ``"round-wise"``: the client's train loss in the previous round.
- ``"five-round"``: mean of the client's train losses over the previous ``window`` (5) rounds;
  ``eta0`` until a client has that many.
- ``"model-diff"``: ``sum_k ||theta_i[k] - theta_new[k]||_F`` from the previous round (distance of
  the client's update from the averaged update).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..core.validation import check_choice, check_integer, check_range

LR_STRATEGIES = ("frozen", "random", "round-wise", "five-round", "model-diff")


def normalise_signals(signals: Sequence[float]) -> list[float]:
    """Max-abs scaling of deviations from the mean to [-1, 1]; all zero if degenerate or non-finite."""
    s = np.asarray(list(signals), dtype=np.float64)
    if s.size == 0:
        return []
    if not np.all(np.isfinite(s)):
        return [0.0] * s.size
    dev = s - s.mean()
    m = float(np.max(np.abs(dev)))
    if not math.isfinite(m) or m == 0.0:
        return [0.0] * s.size
    return [float(x) for x in dev / m]


def personalised_lrs(signals: Sequence[float], eta0: float, alpha: float) -> list[float]:
    """``eta0 + alpha * Phi_i`` for every client."""
    return [eta0 + alpha * phi for phi in normalise_signals(signals)]


def model_diff_signal(client_arrays: Sequence[np.ndarray], new_global: Sequence[np.ndarray]) -> float:
    """Sum over tensors of the Frobenius norm of (client tensor - new global tensor)."""
    if len(client_arrays) != len(new_global):
        raise ValueError("client and global arrays differ in count")
    return float(sum(np.linalg.norm((np.asarray(a, np.float64) - np.asarray(b, np.float64)).ravel())
                     for a, b in zip(client_arrays, new_global)))


class PersonalisedLR:
    """Server-side state of the personalised learning-rate rule.

    Parameters
    ----------
    strategy : str (default: "frozen")
        One of ``frozen``, ``random``, ``round-wise``, ``five-round``, ``model-diff``.
    eta0 : float
        Base learning rate, > 0.
    alpha : float (default: 5e-6)
        Absolute spread: every rate lies in ``[eta0 - alpha, eta0 + alpha]``. ``0 <= alpha < eta0``.
    window : int (default: 5)
        Rounds averaged by ``five-round``, >= 1.
    seed : int (default: 0)
        Seed of the ``random`` draws.
    """

    def __init__(self, strategy: str = "frozen", eta0: float = 1e-5, alpha: float = 5e-6,
                 window: int = 5, seed: int = 0) -> None:
        check_choice("lr_strategy", strategy, LR_STRATEGIES)
        check_range("eta0", eta0, 0.0, low_open=True)
        check_range("lr_alpha", alpha, 0.0, float(eta0), high_open=True)
        check_integer("lr_window", window, 1)
        self.strategy, self.eta0, self.alpha, self.window, self.seed = strategy, float(eta0), float(alpha), int(window), int(seed)
        self.loss_history: dict[int, list[tuple[int, float]]] = {}
        self.diff_signal: dict[int, tuple[int, float]] = {}

    def record(self, server_round: int, train_losses: Mapping[int, float],
               model_diffs: Mapping[int, float] | None = None) -> None:
        """Store the round's train losses (and model-diff signals) keyed by client id."""
        for cid, loss in train_losses.items():
            self.loss_history.setdefault(int(cid), []).append((int(server_round), float(loss)))
        for cid, d in (model_diffs or {}).items():
            self.diff_signal[int(cid)] = (int(server_round), float(d))

    def _signal(self, cid: int, server_round: int) -> float | None:
        if self.strategy == "round-wise":
            h = [l for r, l in self.loss_history.get(cid, []) if r == server_round - 1]
            return h[-1] if h else None
        if self.strategy == "five-round":
            h = [l for r, l in self.loss_history.get(cid, []) if r < server_round]
            return float(np.mean(h[-self.window:])) if len(h) >= self.window else None
        if self.strategy == "model-diff":
            r, d = self.diff_signal.get(cid, (None, None))
            return d if r == server_round - 1 else None
        raise AssertionError(self.strategy)

    def rates(self, server_round: int, client_ids: Sequence[int], scale: float = 1.0) -> dict[int, float]:
        """Learning rate of each client for ``server_round`` (every rate times ``scale``, the
        round's learning-rate decay factor)."""
        ids = sorted(int(c) for c in client_ids)
        if self.strategy == "frozen":
            return {c: scale * self.eta0 for c in ids}
        if self.strategy == "random":
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(server_round)]))
            draws = rng.uniform(self.eta0 - self.alpha, self.eta0 + self.alpha, size=max(ids, default=-1) + 1)
            return {c: scale * float(draws[c]) for c in ids}
        sig = {c: self._signal(c, server_round) for c in ids}
        have = [c for c in ids if sig[c] is not None]
        out = {c: self.eta0 for c in ids}
        if len(have) >= 2:
            out.update(zip(have, personalised_lrs([sig[c] for c in have], self.eta0, self.alpha)))
        return {c: scale * lr for c, lr in out.items()}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """The signal histories (JSON-friendly: string keys, lists)."""
        return {"loss_history": {str(c): [[int(r), float(v)] for r, v in h] for c, h in self.loss_history.items()},
                "diff_signal": {str(c): [int(r), float(d)] for c, (r, d) in self.diff_signal.items()}}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore :meth:`state_dict`."""
        self.loss_history = {int(c): [(int(r), float(v)) for r, v in h] for c, h in state["loss_history"].items()}
        self.diff_signal = {int(c): (int(v[0]), float(v[1])) for c, v in state["diff_signal"].items()}
