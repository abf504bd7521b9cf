"""Cross-check of DO-ADP's noise: Theorem 1 beside a standard accountant (Google's ``dp_accounting``).

:func:`subsampled_gaussian_epsilon` is the plain DP-SGD accounting (Poisson-subsampled Gaussian
composed T times, add-or-remove adjacency) with dp_accounting's RDP or PLD accountant.
:func:`doadp_crosscheck` puts DO-ADP's certified epsilon (:mod:`.accountant`), the paper's Theorem 1
and the paper's credits under a standard accountant side by side.
"""

from __future__ import annotations

import math
import warnings

from ..core.validation import check_choice, check_range
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
    check_range("sampling_rate", sampling_rate, 0, 1, low_open=True)
    steps = check_positive_int(steps, "steps")
    delta = check_delta(delta, name="delta")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(float(sampling_rate), dp_accounting.GaussianDpEvent(z)),
        steps,
    )
    acc = rdp.RdpAccountant() if check_choice("accountant", accountant, ACCOUNTANTS) == "rdp" else pld.PLDAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def doadp_crosscheck(sigma: float, delta0: float, T: int, p: float, k: int, d: int, q: int, G: float, *,
                     batch_size: int = 1, delta: float = 1e-5, sampling: str = "uniform",
                     allow_low_p: bool = False) -> dict:
    """DO-ADP's noise ``sigma`` seen three ways, at one ``delta``:

    * ``certified_eps``: what a standard accountant certifies for the mechanism that runs (no credit
      for p or k/d; :class:`~flwr_strategies.privacy.accountant.GaussianSteps`), the number DO-ADP
      reports first;
    * ``paper_eps`` / ``paper_delta``: Theorem 1's chain (its own delta, usually vacuous);
    * ``<acc>_paper_claim_eps``: the paper's two credits plugged into a standard accountant
      (Poisson rate ``p b/q``, sensitivity ``2 G sqrt(k/d) / b``; add/remove adjacency), to show
      what the credits would be worth if they held. Not a guarantee.
    """
    from .accountant import GaussianSteps

    kw = dict(delta0=delta0, T=T, p=p, k=k, d=d, q=q, G=G, batch_size=batch_size, allow_low_p=allow_low_p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paper = doadp_privacy(sigma, mode="paper", **kw)
    mech = GaussianSteps(sigma, G, batch_size, q, sampling)
    b = int(batch_size)
    z_claim = sigma / (G * math.sqrt(k / d) / b)
    return {
        "sigma": float(sigma),
        "delta": float(delta),
        "certified_eps": mech.epsilon(T, delta),
        "accountant": mech.accountant,
        "paper_eps": paper.eps_tilde,
        "paper_delta": paper.delta_tilde,
        "paper_valid": paper.valid,
        "rdp_paper_claim_eps": subsampled_gaussian_epsilon(z_claim, min(1.0, p * b / q), T, delta, "rdp"),
    }
