"""FedLi: hyper-parameter-free server scaling (FedLi-LS, FedLi-LU) and the FedExP / SCAFFOLD baselines.

Paper: Geetika, D. Uniyal, B. Chatterjee, "Towards Hyper-parameter-free Federated Learning".
The framework-neutral math lives in small modules (NumPy arrays in / out, torch for local training):

* ``armijo``            stochastic Armijo backtracking line search (one local step) and its reset rule.
* ``armijo_training``   one round of local Armijo-SGD on a torch model (FedLi-LS client).
* ``aggregation``       client weights, weighted averages, the pseudo-gradient Delta_t and FunctionSync.
* ``server_ls``         StepSizeSync and the FedLi-LS server GD step.
* ``dfw``               the Deep Frank-Wolfe server step of FedLi-LU.
* ``fedexp``            the FedExP server step (Jhunjhunwala et al. 2023).
* ``scaffold``          SCAFFOLD option II control-variate math (Karimireddy et al. 2020).
"""

from .aggregation import (
    aggregate_delta,
    aggregation_weights,
    check_finite_arrays,
    function_sync,
    weighted_average,
)
from .armijo import ArmijoConfig, ArmijoStepResult, armijo_step, reset_step_size
from .armijo_training import armijo_local_train, make_closure
from .dfw import DFW_PRESETS, DFWConfig, DFWServerStep, dfw_gamma
from .fedexp import fedexp_server_step, fedexp_step_size
from .scaffold import (
    scaffold_client_control_update,
    scaffold_local_sgd,
    scaffold_server_update,
)
from .server_ls import gd_server_step, step_size_sync

__all__ = [
    "ArmijoConfig",
    "ArmijoStepResult",
    "DFWConfig",
    "DFWServerStep",
    "DFW_PRESETS",
    "aggregate_delta",
    "aggregation_weights",
    "armijo_local_train",
    "armijo_step",
    "check_finite_arrays",
    "dfw_gamma",
    "fedexp_server_step",
    "fedexp_step_size",
    "function_sync",
    "gd_server_step",
    "make_closure",
    "reset_step_size",
    "scaffold_client_control_update",
    "scaffold_local_sgd",
    "scaffold_server_update",
    "step_size_sync",
    "weighted_average",
]
