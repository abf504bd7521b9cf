"""FedLi-LS, FedLi-LU, FedExP and SCAFFOLD as legacy Flower strategies over their cores.

Same arguments as Flower's legacy ``FedAvg`` (``initial_parameters``, ``fraction_fit``,
``min_fit_clients``, ``evaluate_fn``, ``on_fit_config_fn``...; see
:class:`~flwr_strategies.adapters.centralized.CentralizedLegacyStrategy`) plus each method's
hyperparameters, given one by one or as a config object (``config=FedExPConfig.code()``).
Compared with the former ``ServerModelStrategy`` classes, replies are checked by the framework's
shared validation: ``on_nonfinite`` is still accepted and maps to ``on_bad_reply`` (see
:mod:`flwr_strategies.fedli.server`).
"""

from __future__ import annotations

from typing import Any

from ..adapters.centralized import CentralizedLegacyStrategy
from ..core.validation import check_policy
from .armijo import ArmijoConfig
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig
from .dfw import DFWConfig
from .server import FedExPServer, FedLiLSServer, FedLiLUServer, ScaffoldServer

__all__ = ["FedLiLS", "FedLiLU", "FedExP", "Scaffold"]


def bad_reply_alias(on_nonfinite: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Map the former ``on_nonfinite`` onto ``on_bad_reply`` (``"raise"``/``"drop"`` keep their meaning)."""
    if on_nonfinite is None:
        return kwargs
    check_policy(on_nonfinite)
    if kwargs.get("on_bad_reply", on_nonfinite) != on_nonfinite:
        raise ValueError(f"on_nonfinite={on_nonfinite!r} contradicts on_bad_reply={kwargs['on_bad_reply']!r}; "
                         "use on_bad_reply only")
    return {**kwargs, "on_bad_reply": on_nonfinite}


def build_config(cls: type, config: Any, values: dict[str, Any]) -> Any:
    """``config`` as given, or ``cls`` from the explicitly set ``values`` (None = the default);
    giving both is an error, so no setting is silently ignored."""
    given = {k: v for k, v in values.items() if v is not None}
    if config is not None:
        if not isinstance(config, cls):
            raise TypeError(f"config must be a {cls.__name__}, got {type(config).__name__}")
        if given:
            raise ValueError(f"pass either config or {sorted(given)}, not both")
        return config
    return cls(**given)


def ls_config(config, step_size_sync, armijo, weighting) -> FedLiLSConfig:
    return build_config(FedLiLSConfig, config, {"step_size_sync": step_size_sync, "armijo": armijo, "weighting": weighting})


def lu_config(config, dfw, loss_report, weighting) -> FedLiLUConfig:
    return build_config(FedLiLUConfig, config, {"dfw": dfw, "loss_report": loss_report, "weighting": weighting})


def fedexp_config(config, eps, eps_scaling, eps_decay, weighting, eval_last2_avg) -> FedExPConfig:
    return build_config(FedExPConfig, config, {"eps": eps, "eps_scaling": eps_scaling, "eps_decay": eps_decay,
                                               "weighting": weighting, "eval_last2_avg": eval_last2_avg})


def scaffold_config(config, server_lr, control_state, weighting, total_examples, correction_in_clip) -> ScaffoldConfig:
    return build_config(ScaffoldConfig, config, {"server_lr": server_lr, "control_state": control_state,
                                                 "weighting": weighting, "total_examples": total_examples,
                                                 "correction_in_clip": correction_in_clip})


class FedLiLS(CentralizedLegacyStrategy):
    """FedLi-LS: hyper-parameter-free FL with a stochastic Armijo line search on the clients.

    Implementation based on Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated
    Learning" (Algorithm 1, ``client_algo="armijo_sgd"``, ``server_algo="GD"``). Clients run SGD whose
    step size comes from a stochastic Armijo line search (:class:`flwr_strategies.clients.fedli.ArmijoSGD`)
    and report the step size they accepted last; the server takes ``w_{t+1} = w_t - eta_g Delta_t``.

    Parameters
    ----------
    step_size_sync : str | float (default: "unit")
        ``eta_g``: ``"unit"`` (1; FedAvg's weighted average of the Armijo clients' models),
        ``"max"`` (largest reported client step) or a constant > 0.
    armijo : ArmijoConfig | None (default: ArmijoConfig())
        Line-search constants sent to the clients (``ArmijoConfig.code()``: the official ``sls`` setup).
    weighting : str (default: "num_examples")
        ``p_i``: ``"num_examples"`` or ``"uniform"``.
    config : FedLiLSConfig | None (default: None)
        All of the above at once (``FedLiLSConfig.code()``); exclusive with them.
    on_nonfinite : str | None (default: None)
        Former name of ``on_bad_reply`` (``"raise"`` or ``"drop"``).
    **kwargs
        Flower's legacy ``FedAvg`` arguments (``initial_parameters`` required) and ``on_bad_reply``.
    """

    def __init__(self, *, step_size_sync: str | float | None = None, armijo: ArmijoConfig | None = None,
                 weighting: str | None = None, config: FedLiLSConfig | None = None, on_nonfinite: str | None = None,
                 **kwargs: Any) -> None:
        self.config = ls_config(config, step_size_sync, armijo, weighting)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedLiLSServer:
        return FedLiLSServer(initial_arrays, config=self.config, **core_kwargs)


class FedLiLU(CentralizedLegacyStrategy):
    """FedLi-LU: hyper-parameter-free FL with a linearized (Deep Frank-Wolfe) server update.

    Implementation based on Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated
    Learning" (Algorithm 1, ``server_algo="DFW"``, and Algorithm 2). Clients run plain SGD and report
    their training loss; the server takes the weighted mean loss ``f`` and applies
    ``gamma = clip((f - eta <Delta, lambda w>) / (eta ||Delta||^2 + eps), 0, 1)``,
    ``w <- w - eta (lambda w + gamma Delta)``.

    Measured: gamma was clipped at 1 in every round of every run we measured
    (``f / (eta ||Delta||^2)`` of 38 to 4,142 on MNIST and digits), so FedLi-LU takes FedAvg's step
    plus the server weight decay; see :class:`~flwr_strategies.fedli.server.FedLiLUServer` and
    docs/results/fedli.md.

    Parameters
    ----------
    dfw : DFWConfig | None (default: DFWConfig(): eta 1, lambda 1e-3, mu 0, eps 1e-5)
        Server constants; ``DFWConfig.preset("code")`` gives the authors' code's.
    loss_report : str (default: "epoch_mean")
        Which loss the clients report: ``"epoch_mean"``, ``"initial"`` or ``"final"``.
    weighting : str (default: "num_examples")
        ``p_i`` for the average and FunctionSync: ``"num_examples"`` or ``"uniform"``.
    config : FedLiLUConfig | None (default: None)
        All of the above at once (``FedLiLUConfig.code()``); exclusive with them.
    on_nonfinite : str | None (default: None)
        Former name of ``on_bad_reply``.
    **kwargs
        Flower's legacy ``FedAvg`` arguments (``initial_parameters`` required) and ``on_bad_reply``.
    """

    def __init__(self, *, dfw: DFWConfig | None = None, loss_report: str | None = None, weighting: str | None = None,
                 config: FedLiLUConfig | None = None, on_nonfinite: str | None = None, **kwargs: Any) -> None:
        self.config = lu_config(config, dfw, loss_report, weighting)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedLiLUServer:
        return FedLiLUServer(initial_arrays, config=self.config, **core_kwargs)


class FedExP(CentralizedLegacyStrategy):
    """FedExP: server step size from the extrapolation rule of POCS.

    Implementation based on Jhunjhunwala, Wang, Joshi, "FedExP: Speeding Up Federated Averaging via
    Extrapolation" (ICLR 2023): ``eta_g = max(1, sum_i ||Delta_i||^2 / (2 S (||Dbar||^2 + eps)))``,
    ``w_{t+1} = w_t - eta_g Dbar``. Clients run plain SGD.

    Parameters
    ----------
    eps : float (default: 1e-3)
        Stabiliser, >= 0 (FedLi's grid {1e-3, 10^-2.5, 1e-2, 10^-1.5, 1e-1}, best 1e-3).
    eps_scaling : str (default: "none")
        ``"clients"``: ``S * eps`` as in the official code.
    eps_decay : float (default: 1.0)
        ``eps_t = eps * eps_decay ** t`` (the code: ``0.998 ** 2``), in (0, 1].
    weighting : str (default: "uniform")
        ``"uniform"`` (paper) or ``"num_examples"`` (code).
    eval_last2_avg : bool (default: False)
        Evaluate the average of the last two global models (the code).
    config : FedExPConfig | None (default: None)
        All of the above at once (``FedExPConfig.code()``); exclusive with them.
    on_nonfinite : str | None (default: None)
        Former name of ``on_bad_reply``.
    **kwargs
        Flower's legacy ``FedAvg`` arguments (``initial_parameters`` required) and ``on_bad_reply``.
    """

    def __init__(self, *, eps: float | None = None, eps_scaling: str | None = None, eps_decay: float | None = None,
                 weighting: str | None = None, eval_last2_avg: bool | None = None, config: FedExPConfig | None = None,
                 on_nonfinite: str | None = None, **kwargs: Any) -> None:
        self.config = fedexp_config(config, eps, eps_scaling, eps_decay, weighting, eval_last2_avg)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedExPServer:
        return FedExPServer(initial_arrays, config=self.config, **core_kwargs)


class Scaffold(CentralizedLegacyStrategy):
    """SCAFFOLD: stochastic controlled averaging (Karimireddy et al., ICML 2020), option II.

    Clients take ``w <- w - eta_l (g_i(w) - c_i + c)`` and update ``c_i+ = c_i - c + (w_t - w_i)/(K eta_l)``;
    the server takes ``w_{t+1} = w_t + eta_g mean_i(w_i - w_t)`` and ``c <- c + (S/N) mean_i(dc_i)``.
    Clients keep ``c_i`` in ``context.state``; the server keeps no per-client table unless
    ``control_state="server"``.

    Parameters
    ----------
    num_partitions : int
        N, the number of clients (``num_clients`` is accepted as its former name). Required.
    server_lr : float (default: 1.0)
        ``eta_g``, > 0.
    control_state : str (default: "client")
        ``"client"`` (``context.state``) or ``"server"`` (a table on the server, sent down each round).
    weighting : str (default: "uniform")
        ``"uniform"`` (paper) or ``"num_examples"`` (the FedExP code; needs ``total_examples``).
    total_examples : int | None (default: None)
        Training examples over all clients (``"num_examples"`` weighting).
    correction_in_clip : bool (default: False)
        Clients clip the corrected gradient (the code) instead of the raw one.
    config : ScaffoldConfig | None (default: None)
        All method settings at once (``ScaffoldConfig.code(total_examples)``); exclusive with them.
    on_nonfinite : str | None (default: None)
        Former name of ``on_bad_reply``.
    **kwargs
        Flower's legacy ``FedAvg`` arguments (``initial_parameters`` required) and ``on_bad_reply``.
    """

    def __init__(self, *, num_partitions: int | None = None, num_clients: int | None = None,
                 server_lr: float | None = None, control_state: str | None = None, weighting: str | None = None,
                 total_examples: int | None = None, correction_in_clip: bool | None = None,
                 config: ScaffoldConfig | None = None, on_nonfinite: str | None = None, **kwargs: Any) -> None:
        if num_partitions is not None and num_clients is not None and num_partitions != num_clients:
            raise ValueError(f"num_partitions={num_partitions} and num_clients={num_clients} disagree")
        n = num_partitions if num_partitions is not None else num_clients
        if n is None:
            raise ValueError("Scaffold needs num_partitions (N, the number of clients, for its S/N control step)")
        self.config = scaffold_config(config, server_lr, control_state, weighting, total_examples, correction_in_clip)
        super().__init__(num_partitions=n, **bad_reply_alias(on_nonfinite, kwargs))

    def build_core(self, initial_arrays, **core_kwargs: Any) -> ScaffoldServer:
        return ScaffoldServer(initial_arrays, config=self.config, **core_kwargs)
