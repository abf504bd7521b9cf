"""Privacy accounting usable on its own.

* :class:`GaussianSteps`, :func:`certified_epsilon`, :func:`composed_certified_epsilon`,
  :func:`calibrate_sigma`: the (epsilon, delta) that Google's dp_accounting certifies for the
  mechanism a DO-ADP agent runs (subsampled Gaussian, replace-one, RDP for uniform batches, PLD for
  Poisson batches), and the noise for a target. This is the number DO-ADP reports first.
* :func:`doadp_sigma` / :func:`doadp_privacy`: the paper's Theorem 1 (Huo et al.), which also
  credits the activation probability (p^2) and Top-k (k/d); no standard accountant certifies either
  credit, so it is reported beside the certified number, labelled.
* :func:`doadp_crosscheck` / :func:`subsampled_gaussian_epsilon`: side-by-side comparisons.
* :class:`AmplifiedAccountant`: the same accounting as a Flower ``PrivacyAccountant`` (``flwr.serverapp``),
  crediting the sampling amplification Flower's own accountant refuses; DO-ADP composes into it per round.
* :func:`calibrate_laplace_b0`, :func:`pure_dp_epsilon`, :func:`geometric_laplace_scale`: pure
  epsilon-DP Laplace calibration (DPDO, CPGT baselines).
"""

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".accountant": ("RDP_ORDERS", "SAMPLINGS", "GaussianSteps", "accountant_for", "calibrate_sigma",
                    "certified_epsilon", "composed_certified_epsilon"),
    ".crosscheck": ("doadp_crosscheck", "subsampled_gaussian_epsilon"),
    ".flower_accountant": ("AmplifiedAccountant", "AmplifiedPrivacyConfig", "check_budget", "doadp_event",
                           "privacy_config_for"),
    ".doadp_accountant": ("PrivacyReport", "comm_rate", "doadp_privacy", "doadp_sigma", "doadp_sigma_components",
                          "noise_variance_ratio", "spent_epsilon"),
    ".laplace": ("calibrate_laplace_b0", "geometric_laplace_epsilon", "geometric_laplace_scale", "pure_dp_epsilon"),
})
__all__ = sorted(_EXPORTS)
