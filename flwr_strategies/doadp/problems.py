"""Test problems for the reference simulator: regularised logistic regression (Experiment A).

Local objective of agent i (Huo et al., Sec. V-A), labels b in {-1, +1}:
``f_i(x) = (1/q) sum_j log(1 + exp(-b_j a_j^T x)) + ||x||^2 / (2q)``; the ridge term is part of the
per-sample loss, so it is clipped together with it. ``f = (1/n) sum_i f_i``.

Data: a binary version of FedProx's Synthetic(alpha, beta) generator (Li et al., 2020), rows scaled
to unit L2 norm (as LIBSVM's ``epsilon_normalized``, so G = 1 is natural). ``iid=True`` (default)
pools all samples and splits them evenly at random, as the paper's IID split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def synthetic_binary(n_agents: int, q: int, d: int, alpha: float = 1.0, beta: float = 1.0, seed: int = 0,
                     iid: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Return ``A (n, q, d)`` unit-norm features and ``B (n, q)`` labels in {-1, +1}.

    Parameters
    ----------
    n_agents, q, d : int
        Agents, samples per agent, features.
    alpha, beta : float
        FedProx Synthetic(alpha, beta) heterogeneity of the models and of the features (>= 0).
    seed : int
        Seed of the generator.
    iid : bool
        Pool and reshuffle across agents (True, default) or keep the per-device distributions.
    """
    rng = np.random.default_rng([0x5EED, int(seed)])
    cov_diag = np.arange(1, d + 1, dtype=np.float64) ** -1.2
    A = np.empty((n_agents, q, d))
    B = np.empty((n_agents, q))
    for i in range(n_agents):
        u = rng.normal(0.0, np.sqrt(alpha))
        bb = rng.normal(0.0, np.sqrt(beta))
        v = rng.normal(bb, 1.0, size=d)
        Wm = rng.normal(u, 1.0, size=(d, 2))
        bias = rng.normal(u, 1.0, size=2)
        x = v + rng.normal(size=(q, d)) * np.sqrt(cov_diag)
        logits = x @ Wm + bias
        A[i] = x
        B[i] = np.where(logits[:, 1] > logits[:, 0], 1.0, -1.0)
    A /= np.linalg.norm(A, axis=2, keepdims=True)
    if iid:
        perm = rng.permutation(n_agents * q)
        A = A.reshape(-1, d)[perm].reshape(n_agents, q, d)
        B = B.reshape(-1)[perm].reshape(n_agents, q)
    return A, B


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


@dataclass
class LogRegProblem:
    """Decentralized regularised logistic regression; ``A (n, q, d)``, ``B (n, q)``."""

    A: np.ndarray
    B: np.ndarray

    @property
    def n(self) -> int:
        return self.A.shape[0]

    @property
    def q(self) -> int:
        return self.A.shape[1]

    @property
    def d(self) -> int:
        return self.A.shape[2]

    def per_sample_grads(self, i: int, x: np.ndarray, idx: np.ndarray, ridge: bool = True) -> np.ndarray:
        """Per-sample gradients ``-b a sigmoid(-b a^T x) + x/q`` of agent i, shape (len(idx), d)."""
        return self.batched_grads(np.array([i]), np.asarray(x)[None, :], np.asarray(idx)[None, :], ridge)[0]

    def batched_grads(self, agents: np.ndarray, X: np.ndarray, idx: np.ndarray, ridge: bool = True) -> np.ndarray:
        """Per-sample gradients for several agents at once: X (m, d), idx (m, b) -> (m, b, d).

        Row-wise arithmetic only, so the result for an agent does not depend on the batch it is in
        (the simulator and the per-agent Flower client get bit-identical gradients).
        """
        agents = np.asarray(agents)
        a = self.A[agents[:, None], idx]                 # (m, b, d)
        b = self.B[agents[:, None], idx]                 # (m, b)
        z = (a * X[:, None, :]).sum(axis=-1)
        coef = -b * _sigmoid(-b * z)
        g = coef[..., None] * a
        if ridge:
            g = g + X[:, None, :] / self.q
        return g

    def objective(self, x: np.ndarray) -> float:
        """Global objective f(x) = (1/n) sum_i f_i(x)."""
        z = self.B * np.einsum("nqd,d->nq", self.A, x)
        return float(np.logaddexp(0.0, -z).mean() + x @ x / (2 * self.q))

    def gradient(self, x: np.ndarray) -> np.ndarray:
        z = self.B * np.einsum("nqd,d->nq", self.A, x)
        coef = -self.B * _sigmoid(-z)
        return np.einsum("nq,nqd->d", coef, self.A) / (self.n * self.q) + x / self.q

    def accuracy(self, x: np.ndarray) -> float:
        return float(np.mean(np.sign(np.einsum("nqd,d->nq", self.A, x)) == self.B))

    def solve(self, tol: float = 1e-12) -> tuple[np.ndarray, float]:
        """High-precision minimiser of f (L-BFGS); returns ``(x*, f(x*))``."""
        from scipy.optimize import minimize

        res = minimize(
            lambda x: (self.objective(x), self.gradient(x)),
            np.zeros(self.d),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 5000, "gtol": tol, "ftol": 1e-15},
        )
        return res.x, float(self.objective(res.x))
