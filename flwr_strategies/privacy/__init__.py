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

#: Exported names and their modules, imported on first use (importing the package stays cheap).
_EXPORTS = {name: module for module, names in {
    ".accountant": ("RDP_ORDERS", "SAMPLINGS", "GaussianSteps", "accountant_for", "calibrate_sigma",
                    "certified_epsilon", "composed_certified_epsilon"),
    ".crosscheck": ("doadp_crosscheck", "subsampled_gaussian_epsilon"),
    ".flower_accountant": ("AmplifiedAccountant", "AmplifiedPrivacyConfig", "check_budget", "doadp_event",
                           "privacy_config_for"),
    ".doadp_accountant": ("PrivacyReport", "comm_rate", "doadp_privacy", "doadp_sigma", "doadp_sigma_components",
                          "noise_variance_ratio", "spent_epsilon"),
    ".laplace": ("calibrate_laplace_b0", "geometric_laplace_epsilon", "geometric_laplace_scale", "pure_dp_epsilon"),
}.items() for name in names}

__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "AmplifiedAccountant",
    "AmplifiedPrivacyConfig",
    "GaussianSteps",
    "PrivacyReport",
    "RDP_ORDERS",
    "SAMPLINGS",
    "accountant_for",
    "calibrate_laplace_b0",
    "calibrate_sigma",
    "check_budget",
    "certified_epsilon",
    "comm_rate",
    "composed_certified_epsilon",
    "doadp_crosscheck",
    "doadp_event",
    "doadp_privacy",
    "doadp_sigma",
    "doadp_sigma_components",
    "geometric_laplace_epsilon",
    "geometric_laplace_scale",
    "noise_variance_ratio",
    "privacy_config_for",
    "pure_dp_epsilon",
    "spent_epsilon",
    "subsampled_gaussian_epsilon",
]
