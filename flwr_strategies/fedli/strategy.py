"""FedLi-LS, FedLi-LU, FedExP and SCAFFOLD as legacy Flower strategies (``flwr.server.strategy``).

Each takes Flower's legacy ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.LegacyStrategy`)
and its hyperparameters as keyword arguments, the fields of its config dataclass in :mod:`.config`
(a preset: ``FedExP(**vars(FedExPConfig.code()))``).
"""

from __future__ import annotations

from ..adapters import LegacyStrategy
from ..adapters.method import LazyCore
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig

__all__ = ["FedLiLS", "FedLiLU", "FedExP", "Scaffold"]


class FedLiLS(LegacyStrategy):
    """FedLi-LS: hyper-parameter-free FL with a stochastic Armijo line search on the clients.

    Implementation based on Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated
    Learning" (Algorithm 1, Armijo-SGD clients, GD server step). Clients run SGD whose step size
    comes from a stochastic Armijo line search (:class:`flwr_strategies.clients.fedli.ArmijoSGD`)
    and report the step size they accepted last; the server takes ``w_{t+1} = w_t - eta_g Delta_t``.

    Parameters
    ----------
    step_size_sync : str | float (default: "unit")
        ``eta_g``: ``"unit"`` (FedAvg's weighted average of the Armijo clients' models), ``"max"``
        (largest reported client step) or a constant > 0.
    armijo : ArmijoConfig (default: ArmijoConfig())
        Line-search constants sent to the clients.
    weighting : str (default: "num_examples")
        ``p_i``: ``"num_examples"`` or ``"uniform"``.

    See :class:`~flwr_strategies.fedli.config.FedLiLSConfig` for the ranges and sources.
    """

    core_cls = LazyCore("flwr_strategies.fedli.server:FedLiLSServer")  # the servers import torch (SCAFFOLD's)
    hyperparameters = {"config": FedLiLSConfig}


class FedLiLU(LegacyStrategy):
    """FedLi-LU: hyper-parameter-free FL with a linearized (Deep Frank-Wolfe) server update.

    Implementation based on Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated
    Learning" (Algorithm 1 with the DFW server step, Algorithm 2). Clients run plain SGD and report
    their training loss; the server takes the weighted mean loss ``f`` and applies
    ``gamma = clip((f - eta <Delta, lambda w>) / (eta ||Delta||^2 + eps), 0, 1)``,
    ``w <- w - eta (lambda w + gamma Delta)``. How large gamma gets depends on the clients'
    training; see :class:`~flwr_strategies.fedli.server.FedLiLUServer` and docs/results/fedli.md.

    Parameters
    ----------
    dfw : DFWConfig (default: DFWConfig(): eta 1, lambda 1e-3, mu 0, eps 1e-5)
        Server constants; ``DFWConfig.preset("code")`` gives the authors' code's.
    loss_report : str (default: "epoch_mean")
        Which loss the clients report: ``"epoch_mean"``, ``"initial"`` or ``"final"``.
    weighting : str (default: "num_examples")
        ``p_i`` of the average and of the loss: ``"num_examples"`` or ``"uniform"``.

    See :class:`~flwr_strategies.fedli.config.FedLiLUConfig`.
    """

    core_cls = LazyCore("flwr_strategies.fedli.server:FedLiLUServer")
    hyperparameters = {"config": FedLiLUConfig}


class FedExP(LegacyStrategy):
    """FedExP: server step size from the extrapolation rule of POCS.

    Implementation based on Jhunjhunwala, Wang, Joshi, "FedExP: Speeding Up Federated Averaging via
    Extrapolation" (ICLR 2023): ``eta_g = max(1, sum_i ||Delta_i||^2 / (2 S (||Dbar||^2 + eps)))``,
    ``w_{t+1} = w_t - eta_g Dbar``. Clients run plain SGD.

    Parameters
    ----------
    eps : float (default: 1e-3)
        Stabiliser, >= 0.
    eps_scaling : str (default: "none")
        ``"clients"``: ``S * eps`` as in the official code.
    eps_decay : float (default: 1.0)
        ``eps_t = eps * eps_decay ** t``, in (0, 1].
    weighting : str (default: "uniform")
        ``"uniform"`` (paper) or ``"num_examples"`` (code).
    eval_last2_avg : bool (default: False)
        Evaluate the average of the last two global models (the code).

    See :class:`~flwr_strategies.fedli.config.FedExPConfig`.
    """

    core_cls = LazyCore("flwr_strategies.fedli.server:FedExPServer")
    hyperparameters = {"config": FedExPConfig}


class Scaffold(LegacyStrategy):
    """SCAFFOLD: stochastic controlled averaging (Karimireddy et al., ICML 2020), option II.

    Clients take ``w <- w - eta_l (g_i(w) - c_i + c)`` and update
    ``c_i+ = c_i - c + (w_t - w_i)/(K eta_l)``; the server takes
    ``w_{t+1} = w_t + eta_g mean_i(w_i - w_t)`` and ``c <- c + (S/N) mean_i(dc_i)``, with N the
    number of clients that connected. Clients keep ``c_i`` in ``context.state`` unless
    ``control_state="server"``. Replies carry the model and the control-variate change, so
    wrappers that clip replies as model updates (Flower's server-side clipping) do not apply.

    Parameters
    ----------
    server_lr : float (default: 1.0)
        ``eta_g``, > 0.
    control_state : str (default: "client")
        ``"client"`` (``context.state``) or ``"server"`` (a table on the server).
    weighting : str (default: "uniform")
        ``"uniform"`` (paper) or ``"num_examples"`` (the FedExP code; needs ``total_examples``).
    total_examples : int | None (default: None)
        Training examples over all clients (``"num_examples"`` weighting).
    correction_in_clip : bool (default: False)
        Clients clip the corrected gradient (the code) instead of the raw one.

    See :class:`~flwr_strategies.fedli.config.ScaffoldConfig`.
    """

    core_cls = LazyCore("flwr_strategies.fedli.server:ScaffoldServer")
    hyperparameters = {"config": ScaffoldConfig}
