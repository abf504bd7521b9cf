"""Hyperparameters of FedAvg, FedProx and FedAdam (frozen, validated on construction)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.declare import setting
from ..core.validation import check_range

__all__ = ["FedAvgConfig", "FedProxConfig", "FedAdamConfig"]



@dataclass(frozen=True)
class FedAvgConfig:
    """FedAvg (McMahan et al., AISTATS 2017) has no server hyperparameters."""


@dataclass(frozen=True)
class FedProxConfig:
    """FedProx (Li et al., MLSys 2020)."""

    proximal_mu: float = setting(0.01, ">= 0",
                                 "project: from FedProx's own grid {0.001, 0.01, 0.1, 1} (Li et al., MLSys 2020), "
                                 "which reports no single best value",
                                 "Weight of the proximal term ``mu/2 ||w - w_t||^2`` added by the clients (0 is FedAvg).")

    def __post_init__(self) -> None:
        check_range("proximal_mu", self.proximal_mu, 0.0)


@dataclass(frozen=True)
class FedAdamConfig:
    """FedAdam (Reddi et al., ICLR 2021), with Flower's defaults."""

    eta: float = setting(0.01, "> 0", "project: host paper (FedLi) App. C's server-lr grid {0.01, 0.1, 1}, which "
                                      "reports no FedAdam winner; Flower's FedAdam uses 0.1", "Server learning rate.")
    beta_1: float = setting(0.9, "[0, 1)", "paper: Reddi et al., ICLR 2021, Sec. 5 (beta_1 = 0.9)",
                            "First-moment decay.")
    beta_2: float = setting(0.99, "[0, 1)", "paper: Reddi et al., ICLR 2021, Sec. 5 (beta_2 = 0.99)",
                            "Second-moment decay.")
    tau: float = setting(1e-3, "> 0", "project: Flower's Message-API FedAdam default (tau = 1e-3); Reddi et al. "
                                      "tune tau per task",
                         "Adaptivity (denominator offset).")

    def __post_init__(self) -> None:
        check_range("eta", self.eta, 0.0, low_open=True)
        check_range("beta_1", self.beta_1, 0.0, 1.0, high_open=True)
        check_range("beta_2", self.beta_2, 0.0, 1.0, high_open=True)
        check_range("tau", self.tau, 0.0, low_open=True)
