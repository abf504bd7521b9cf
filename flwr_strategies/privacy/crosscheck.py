"""Cross-check of DO-ADP's noise against a standard accountant (Google's ``dp_accounting``).

The standard number is the plain Poisson-subsampled Gaussian mechanism composed T times (DP-SGD
accounting), computed by the RDP accountant and by the PLD accountant under add-or-remove adjacency
with the replace-one L2 sensitivity as the noise unit (``noise_multiplier = sigma / Delta``). Two
settings are reported:

* ``conservative``: sampling rate ``b/q`` (activation is visible, no credit) and ``Delta = 2G/b``
  (the full noisy gradient is eventually released by error feedback);
* ``paper_claim``: the paper's credits plugged into the same standard mechanism, rate ``p b/q`` and
  ``Delta = 2 G sqrt(k/d) / b``.
"""

from __future__ import annotations

import math
import warnings

from .doadp_accountant import doadp_privacy
from .validation import check_clip, check_delta, check_positive_int

ACCOUNTANTS = ("rdp", "pld")


def subsampled_gaussian_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
) -> float:
    """Epsilon of ``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Parameters
    ----------
    noise_multiplier : float
        Noise std divided by the L2 sensitivity (> 0).
    sampling_rate : float
        Poisson sampling probability in (0, 1].
    steps : int
        Number of compositions (>= 1).
    delta : float
        Target delta in (0, 1).
    accountant : str, optional
        ``"rdp"`` (default) or ``"pld"``.
    """
    import dp_accounting
    from dp_accounting import pld, rdp

    z = check_clip(noise_multiplier, name="noise_multiplier")
    if not 0.0 < float(sampling_rate) <= 1.0:
        raise ValueError(f"sampling_rate must lie in (0, 1], got sampling_rate={sampling_rate!r}")
    steps = check_positive_int(steps, "steps")
    delta = check_delta(delta, name="delta")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(float(sampling_rate), dp_accounting.GaussianDpEvent(z)),
        steps,
    )
    if accountant == "rdp":
        acc = rdp.RdpAccountant()
    elif accountant == "pld":
        acc = pld.PLDAccountant()
    else:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got accountant={accountant!r}")
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def doadp_crosscheck(
    sigma: float,
    delta0: float,
    T: int,
    p: float,
    k: int,
    d: int,
    q: int,
    G: float,
    batch_size: int = 1,
    delta: float | None = None,
    accountants: tuple[str, ...] = ("rdp",),
    allow_low_p: bool = False,
) -> dict:
    """DO-ADP's own (paper and conservative) epsilons beside dp_accounting's, at one delta.

    ``delta`` defaults to the paper chain's ``delta_tilde`` (mode ``paper``) capped at 1e-2 when
    that is vacuous. Returns a flat dict of floats (keys ``paper_eps``, ``paper_delta``,
    ``conservative_eps``, ``conservative_delta``, ``<accountant>_conservative_eps``,
    ``<accountant>_paper_claim_eps``, ``delta``).
    """
    kw = dict(delta0=delta0, T=T, p=p, k=k, d=d, q=q, G=G, batch_size=batch_size,
              allow_low_p=allow_low_p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paper = doadp_privacy(sigma, mode="paper", **kw)
        cons = doadp_privacy(sigma, mode="conservative", **kw)
    if delta is None:
        delta = min(paper.delta_tilde, 1e-2)
    out = {
        "sigma": float(sigma),
        "paper_eps": paper.eps_tilde,
        "paper_delta": paper.delta_tilde,
        "paper_valid": paper.valid,
        "conservative_eps": cons.eps_tilde,
        "conservative_delta": cons.delta_tilde,
        "conservative_valid": cons.valid,
        "delta": float(delta),
    }
    b = int(batch_size)
    for acc in accountants:
        z_cons = sigma / (2.0 * G / b)
        z_paper = sigma / (2.0 * G * math.sqrt(k / d) / b)
        out[f"{acc}_conservative_eps"] = subsampled_gaussian_epsilon(z_cons, b / q, T, delta, acc)
        out[f"{acc}_paper_claim_eps"] = subsampled_gaussian_epsilon(z_paper, p * b / q, T, delta, acc)
    return out
