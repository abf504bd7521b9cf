"""Privacy accounting usable on its own.

* :func:`doadp_sigma` / :func:`doadp_privacy`: DO-ADP's Theorem 1 (Huo et al.), paper mode and
  conservative mode, with the noise floor that keeps the proof valid for short runs.
* :func:`doadp_crosscheck` / :func:`subsampled_gaussian_epsilon`: the same noise through
  dp-accounting's RDP / PLD accountants for the plain Poisson-subsampled Gaussian mechanism.
* :func:`geometric_laplace_scale`: pure eps-DP Laplace calibration (DPDO, CPGT baselines).
"""

from .crosscheck import doadp_crosscheck, subsampled_gaussian_epsilon
from .doadp_accountant import (
    PrivacyReport,
    comm_rate,
    doadp_privacy,
    doadp_sigma,
    doadp_sigma_components,
    noise_variance_ratio,
    spent_epsilon,
)
from .laplace import geometric_laplace_epsilon, geometric_laplace_scale

__all__ = [
    "PrivacyReport",
    "comm_rate",
    "doadp_crosscheck",
    "doadp_privacy",
    "doadp_sigma",
    "doadp_sigma_components",
    "geometric_laplace_epsilon",
    "geometric_laplace_scale",
    "noise_variance_ratio",
    "spent_epsilon",
    "subsampled_gaussian_epsilon",
]
