"""FedLi-LU Flower strategy: clients run plain SGD and report their loss; the server makes one
Deep Frank-Wolfe step on the aggregated delta (spec §4)."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import Scalar

from .aggregation import function_sync, weighted_average
from .dfw import DFWConfig, DFWServerStep
from .strategy_base import ClientResult, ServerModelStrategy

__all__ = ["FedLiLU"]

LOSS_REPORTS = ("epoch_mean", "initial", "final")


class FedLiLU(ServerModelStrategy):
    """FedLi-LU: hyper-parameter-free FL with a linearized (Deep Frank-Wolfe) server update.

    Implementation based on Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated
    Learning" (Algorithm 1 with ``server_algo="DFW"`` and Algorithm 2). The server takes the weighted
    mean of the client-reported losses as the objective value ``f_t^g`` and applies

        gamma_t = clip((f_t^g - eta <Delta_t, lambda w_t>) / (eta ||Delta_t||^2 + eps), 0, 1)
        w_{t+1} = w_t - eta (lambda w_t + gamma_t Delta_t)   (+ DFW momentum when mu > 0)

    so the step along ``Delta_t`` is a Polyak-like ratio capped at ``eta`` (never an extrapolation).

    Parameters
    ----------
    dfw : DFWConfig | None (default: None, i.e. the paper-faithful ``DFWConfig()``: eta 1, lambda 1e-3,
        mu 0, eps 1e-5). ``DFWConfig.preset("authors_code")`` gives the authors' code constants.
    loss_report : str (default: "epoch_mean")
        Which loss the clients report (sent in the fit config): mean minibatch loss of the local epoch,
        ``"initial"`` (loss of ``w_t`` on the local data) or ``"final"`` (loss of the local model).
    weighting : str (default: "num_examples")
        ``p_i`` for the model average and for FunctionSync: ``"num_examples"`` or ``"uniform"``.
    on_nonfinite : str (default: "raise")
        ``"raise"`` or ``"drop"`` for clients reporting NaN/inf weights or losses.
    **kwargs
        Passed to :class:`flwr.server.strategy.FedAvg` (``initial_parameters`` required).
    """

    required_metrics = ("train_loss",)

    def __init__(
        self,
        *,
        dfw: DFWConfig | None = None,
        loss_report: str = "epoch_mean",
        weighting: str = "num_examples",
        on_nonfinite: str = "raise",
        **kwargs: Any,
    ) -> None:
        if loss_report not in LOSS_REPORTS:
            raise ValueError(f"`loss_report` must be one of {LOSS_REPORTS}, got {loss_report!r}")
        self.dfw = DFWServerStep(dfw)
        self.loss_report = loss_report
        super().__init__(
            weighting=weighting, on_nonfinite=on_nonfinite, extra_fit_config={"loss_report": loss_report}, **kwargs
        )

    def __repr__(self) -> str:
        return f"FedLiLU(dfw={self.dfw.config}, loss_report={self.loss_report!r}, weighting={self.weighting!r})"

    def server_update(self, server_round: int, results: list[ClientResult]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        p = self.weights_of(results)
        f_g = function_sync([float(r.metrics["train_loss"]) for r in results], p)
        avg = weighted_average([r.arrays for r in results], p)
        new, info = self.dfw.step(self.current, avg, f_g)
        return new, {"train_loss": f_g, **{k: float(v) for k, v in info.items()}}
