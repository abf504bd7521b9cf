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

    Its hyperparameters are the fields of :class:`~flwr_strategies.fedli.config.FedLiLSConfig`.
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

    Its hyperparameters are the fields of :class:`~flwr_strategies.fedli.config.FedLiLUConfig`.
    """

    core_cls = LazyCore("flwr_strategies.fedli.server:FedLiLUServer")
    hyperparameters = {"config": FedLiLUConfig}


class FedExP(LegacyStrategy):
    """FedExP: server step size from the extrapolation rule of POCS.

    Implementation based on Jhunjhunwala, Wang, Joshi, "FedExP: Speeding Up Federated Averaging via
    Extrapolation" (ICLR 2023): ``eta_g = max(1, sum_i ||Delta_i||^2 / (2 S (||Dbar||^2 + eps)))``,
    ``w_{t+1} = w_t - eta_g Dbar``. Clients run plain SGD.

    Its hyperparameters are the fields of :class:`~flwr_strategies.fedli.config.FedExPConfig`.
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

    Its hyperparameters are the fields of :class:`~flwr_strategies.fedli.config.ScaffoldConfig`.
    """

    core_cls = LazyCore("flwr_strategies.fedli.server:ScaffoldServer")
    hyperparameters = {"config": ScaffoldConfig}
