"""Privacy accountant of DO-ADP (Theorem 1 of Huo et al.).

Paper: W. Huo, C. Liu, K. Ding, K. H. Johansson, L. Shi, "Decentralized Optimization with Amplified
Privacy via Efficient Communication".

The chain (all logs natural):

1. Gaussian mechanism on the k transmitted coordinates of one clipped per-sample gradient:
   sensitivity ``Delta = 2 G sqrt(k_eff/d) / b`` (replace-one adjacency, per-coordinate clip G/sqrt(d)),
   ``eps_t = sqrt(2 ln(1.25/delta0)) * Delta / sigma``.
2. Amplification by agent activation times uniform sample choice at rate ``r = p_amp * b / q``:
   ``eps'_t = 2 r eps_t`` (the paper's linear bound) or ``ln(1 + r (e^{eps_t} - 1))`` (exact).
3. Heterogeneous advanced composition over T steps, ``S = T eps'_t^2``:
   ``eps~ = sqrt(2 S ln(e + sqrt(S)/dhat)) + S``, ``delta~ = 1 - (1 - dhat)(1 - p_amp delta0)^T``,
   with the paper's ``dhat = sqrt(S)`` by default.

Theorem 1 in closed form: ``sigma_thm = (4 p G / (q eps)) sqrt(10 (k/d) T ln(1.25/delta0))``, valid
when ``T >= q^2 eps^2 / (4 p^2 b^2)``. Below that T the library returns the floor
``sigma_floor = 2 G sqrt(10 k ln(1.25/delta0) / d) / b``, at which every condition of the proof holds.

Two accounting modes:

* ``mode="paper"``: as claimed by the paper (activation credit p^2, sparsification credit k/d).
* ``mode="conservative"``: no credit for activation (``p_amp = 1``) nor for Top-k (``k_eff = d``).
  The paper's claims are not rigorous: activation is visible to an observer (inactive agents send
  nothing) and Top-k with error feedback eventually releases every noisy coordinate.

This chain is the paper's *bound*, reported beside the certified one, never instead of it. No
standard accountant certifies the p^2 and k/d credits; the epsilon DO-ADP reports first comes from
:mod:`flwr_strategies.privacy.accountant` (dp_accounting over the mechanism that runs). With the
paper's ``delta_hat = sqrt(S)`` the chain's own delta is about ``eps / sqrt(5)`` (0.2-0.45 at
eps 0.5-1), which guarantees little; a caller-chosen ``delta_hat`` with a small k/d can make the
chain's epsilon fall below what a standard accountant certifies (e.g. q=3000, d=20000, k/d=0.005,
p=0.5, T=3000, delta0=1e-9, delta_hat=1e-6: 0.035 here against 0.625 certified at the same delta).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from ..core.validation import check_choice
from .validation import (
    check_activation,
    check_clip,
    check_delta,
    check_epsilon,
    check_k,
    check_positive_int,
)

MODES = ("paper", "conservative")
CLIP_MODES = ("coordinate", "l2")
AMPLIFICATIONS = ("paper_linear", "exact")
NOISE_SCALINGS = ("theorem", "paper_prose")


@dataclass(frozen=True)
class _Chain:
    """Resolved parameters of the privacy chain after mode and clip-mode handling."""

    p_amp: float
    k_eff: int
    d: int
    q: int
    T: int
    b: int
    G: float
    delta0: float

    @property
    def sensitivity(self) -> float:
        return 2.0 * self.G * math.sqrt(self.k_eff / self.d) / self.b

    @property
    def rate(self) -> float:
        return self.p_amp * self.b / self.q


def _resolve(delta0, T, p, k, d, q, G, batch_size, clip_mode, mode, allow_low_p) -> _Chain:
    delta0 = check_delta(delta0, name="delta0")
    T = check_positive_int(T, "T")
    p = check_activation(p, allow_low_p=allow_low_p)
    k, d = check_k(k, d)
    q = check_positive_int(q, "q")
    G = check_clip(G, name="G")
    b = check_positive_int(batch_size, "batch_size")
    check_choice("clip_mode", clip_mode, CLIP_MODES)
    check_choice("mode", mode, MODES)
    if p * b / q > 1.0:
        raise ValueError(
            f"sampling rate p*batch_size/q must be <= 1, got p={p}, batch_size={b}, q={q}"
        )
    k_eff = d if (clip_mode == "l2" or mode == "conservative") else k
    p_amp = 1.0 if mode == "conservative" else p
    return _Chain(p_amp=p_amp, k_eff=k_eff, d=d, q=q, T=T, b=b, G=G, delta0=delta0)


def doadp_sigma_components(epsilon: float, delta0: float, T: int, p: float, k: int, d: int, q: int, G: float, *,
                           batch_size: int = 1, clip_mode: str = "coordinate", mode: str = "paper",
                           allow_low_p: bool = False) -> dict:
    """Return ``sigma_thm``, ``sigma_floor``, ``T_min`` and the resolved ``p_amp``/``k_eff``.

    Arguments as :func:`doadp_sigma` (``batch_size``, ``clip_mode``, ``mode``, ``allow_low_p``: its
    ``**options``).
    """
    eps = check_epsilon(epsilon)
    c = _resolve(delta0, T, p, k, d, q, G, batch_size, clip_mode, mode, allow_low_p)
    log_term = math.log(1.25 / c.delta0)
    # sigma_thm^2 = 160 k p^2 T ln(1.25/delta0) G^2 / (q^2 d eps^2)   (b cancels; DO-ADP paper, Theorem 1)
    sigma_thm = (4.0 * c.p_amp * c.G / (c.q * eps)) * math.sqrt(
        10.0 * (c.k_eff / c.d) * c.T * log_term
    )
    sigma_floor = 2.0 * c.G * math.sqrt(10.0 * c.k_eff * log_term / c.d) / c.b
    t_min = (c.q * eps) ** 2 / (4.0 * c.p_amp**2 * c.b**2)
    return {
        "sigma_thm": sigma_thm,
        "sigma_floor": sigma_floor,
        "T_min": t_min,
        "theorem_applies": c.T >= t_min,
        "p_amp": c.p_amp,
        "k_eff": c.k_eff,
    }


def doadp_sigma(epsilon: float, delta0: float, T: int, p: float, k: int, d: int, q: int, G: float, *,
                strict: bool = False, noise_scaling: str = "theorem", **options) -> float:
    """Noise standard deviation per coordinate for DO-ADP to be (epsilon, delta)-DP.

    Parameters
    ----------
    epsilon : float
        Target privacy budget, ``0 < epsilon <= 1`` (Theorem 1 needs epsilon <= 1).
    delta0 : float
        Per-step delta of the Gaussian mechanism, in (0, 1). The resulting overall delta is
        reported by :func:`doadp_privacy` (about ``epsilon/sqrt(5) + p T delta0``).
    T : int
        Total number of iterations (>= 1); the composition is over all T iterations.
    p : float
        Activation probability, in [1/2, 1] (``allow_low_p=True`` accepts (0, 1)).
    k : int
        Top-k coordinates per message, ``1 <= k <= d``.
    d : int
        Model dimension (flattened number of parameters).
    q : int
        Local dataset size of each agent (>= 1).
    G : float
        Clipping bound (> 0): each coordinate of a per-sample gradient is clipped to G/sqrt(d).
    strict : bool, optional
        If True, raise when ``T < T_min`` (the theorem's condition) instead of returning the floor.
    noise_scaling : str, optional
        ``"theorem"`` (default) or ``"paper_prose"``: sigma = sigma_dense * p * k/d, the paper's
        Fig. 3 prose reading. The latter is not backed by Theorem 1.
    **options
        Keyword-only, those of :func:`doadp_sigma_components`: ``batch_size`` (samples per step,
        default 1, the paper's; the noise goes on the mean of the clipped gradients), ``clip_mode``
        (``"coordinate"``, default, or ``"l2"``, which forces ``k_eff = d``), ``mode`` (``"paper"``,
        default, as claimed by the paper, or ``"conservative"``: ``p_amp = 1``, ``k_eff = d``) and
        ``allow_low_p`` (accept ``0 < p < 1/2``; default False).

    Returns
    -------
    float
        ``max(sigma_thm, sigma_floor)``.
    """
    check_choice("noise_scaling", noise_scaling, NOISE_SCALINGS)
    comp = doadp_sigma_components(epsilon, delta0, T, p, k, d, q, G, **options)
    if strict and not comp["theorem_applies"]:
        raise ValueError(
            f"Theorem 1 needs T >= q^2 eps^2 / (4 p^2 b^2) = {comp['T_min']:.6g}, got T={T}; "
            "pass strict=False to use the noise floor instead"
        )
    if noise_scaling == "paper_prose":
        dense = doadp_sigma_components(epsilon, delta0, T, 1.0, d, d, q, G, **options)
        return max(dense["sigma_thm"], dense["sigma_floor"]) * comp["p_amp"] * comp["k_eff"] / d
    return max(comp["sigma_thm"], comp["sigma_floor"])


@dataclass
class PrivacyReport:
    """Result of :func:`doadp_privacy`."""

    eps_t: float
    eps_prime_t: float
    S: float
    eps_tilde: float
    delta_tilde: float
    valid: bool
    reasons: list = field(default_factory=list)
    mode: str = "paper"
    T: int = 0


def doadp_privacy(sigma: float, delta0: float, T: int, p: float, k: int, d: int, q: int, G: float, *,
                  batch_size: int = 1, clip_mode: str = "coordinate", amplification: str = "paper_linear",
                  delta_hat: float | None = None, mode: str = "paper", allow_low_p: bool = False) -> PrivacyReport:
    """(epsilon, delta) that DO-ADP with noise std ``sigma`` achieves after ``T`` iterations.

    Parameters are those of :func:`doadp_sigma` (its ``**options`` keyword-only), plus:

    sigma : float
        Noise standard deviation per coordinate (> 0).
    amplification : str, optional
        ``"paper_linear"`` (default; ``eps'_t = 2 r eps_t``) or ``"exact"``
        (``eps'_t = ln(1 + r (e^{eps_t} - 1))``).
    delta_hat : float or None, optional
        The composition slack dhat in (0, 1]; default None uses the paper's ``sqrt(S)``.

    Returns
    -------
    PrivacyReport
        ``eps_t, eps_prime_t, S, eps_tilde, delta_tilde, valid, reasons``. ``valid`` is False when a
        condition of the proof fails (``eps_t >= 1``, ``eps'_t > 0.9``, ``S > 1``, ``dhat > 1``).
    """
    check_choice("amplification", amplification, AMPLIFICATIONS)
    sigma = check_clip(sigma, name="sigma")
    c = _resolve(delta0, T, p, k, d, q, G, batch_size, clip_mode, mode, allow_low_p)
    eps_t = math.sqrt(2.0 * math.log(1.25 / c.delta0)) * c.sensitivity / sigma
    eps_p = 2.0 * c.rate * eps_t if amplification == "paper_linear" else math.log1p(c.rate * math.expm1(eps_t))
    S = c.T * eps_p**2
    reasons = []
    if eps_t >= 1.0:
        reasons.append(f"per-step eps_t={eps_t:.4g} >= 1: classical Gaussian mechanism needs eps < 1")
    if eps_p > 0.9:
        reasons.append(f"eps'_t={eps_p:.4g} > 0.9: advanced composition (Lemma 5) needs <= 0.9")
    if S > 1.0:
        reasons.append(f"S={S:.4g} > 1")
    dhat = dhat_c = math.sqrt(S) if delta_hat is None else float(delta_hat)
    if not 0.0 < dhat <= 1.0:
        reasons.append(f"delta_hat={dhat:.4g} outside (0, 1]")
        dhat_c = min(max(dhat, 1e-300), 1.0)
    eps_tilde = math.sqrt(2.0 * S * math.log(math.e + math.sqrt(S) / dhat_c)) + S
    delta_tilde = 1.0 - (1.0 - dhat_c) * (1.0 - c.p_amp * c.delta0) ** c.T
    if delta_tilde > 1e-2:
        warnings.warn(
            f"DO-ADP accountant: delta_tilde={delta_tilde:.4g} > 1e-2 (with the paper's dhat=sqrt(S), "
            "delta is about eps/sqrt(5)); the guarantee is weak",
            stacklevel=2,
        )
    if c.p_amp * c.T * c.delta0 > 0.1:
        warnings.warn(
            f"DO-ADP accountant: p*T*delta0={c.p_amp * c.T * c.delta0:.4g} > 0.1 (vacuous delta)",
            stacklevel=2,
        )
    return PrivacyReport(
        eps_t=eps_t,
        eps_prime_t=eps_p,
        S=S,
        eps_tilde=eps_tilde,
        delta_tilde=delta_tilde,
        valid=not reasons,
        reasons=reasons,
        mode=mode,
        T=c.T,
    )


def spent_epsilon(sigma: float, t: int, **kw) -> float:
    """eps_tilde after the first ``t`` iterations (the per-round 'spent epsilon').

    Keyword arguments are those of :func:`doadp_privacy` except ``T``; warnings are silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return doadp_privacy(sigma, T=t, **kw).eps_tilde


def comm_rate(p: float, k: int, d: int) -> float:
    """Expected fraction of dense all-agent traffic per iteration, ``p k / d``."""
    return float(p) * k / d


def noise_variance_ratio(p: float, k: int, d: int) -> float:
    """Remark 1: ``sigma_thm(p, k)^2 / sigma_thm(1, d)^2 = p^2 k / d``."""
    return float(p) ** 2 * k / d
