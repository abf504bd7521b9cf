"""FedLi: hyper-parameter-free server scaling (FedLi-LS, FedLi-LU) and the FedExP / SCAFFOLD baselines.

Paper: Geetika, D. Uniyal, B. Chatterjee, "Towards Hyper-parameter-free Federated Learning".
Baselines: FedExP (Jhunjhunwala, Wang, Joshi, ICLR 2023), SCAFFOLD (Karimireddy et al., ICML 2020).

* ``config``            frozen, validated hyperparameters (paper defaults, ``.code()`` = the official code's).
* ``armijo``            stochastic Armijo backtracking line search (one local step) and its reset rule.
* ``armijo_optim``      :class:`ArmijoSGD`, the line search as a ``torch.optim.Optimizer`` (client piece).
* ``armijo_training``   one round of local Armijo-SGD on a torch model (the ready-made client's loop).
* ``aggregation``       client weights, weighted averages, the pseudo-gradient Delta_t and FunctionSync.
* ``server_ls``         StepSizeSync and the FedLi-LS server GD step.
* ``dfw``               the Deep Frank-Wolfe server step of FedLi-LU.
* ``fedexp``            the FedExP server step.
* ``scaffold``          SCAFFOLD option II math and :class:`ScaffoldCorrection` (client piece).
* ``server``            the server cores (``FedLiLSServer``, ``FedLiLUServer``, ``FedExPServer``, ``ScaffoldServer``).
* ``strategy``          legacy Flower strategies ``FedLiLS``, ``FedLiLU``, ``FedExP``, ``Scaffold``.
* ``serverapp``         Message-API strategies with the same names.
* ``registration``      the registered methods ``fedli-ls``, ``fedli-lu``, ``fedexp``, ``scaffold``.
"""

from .aggregation import (
    aggregate_delta,
    aggregation_weights,
    check_finite_arrays,
    function_sync,
    weighted_average,
)
from .armijo import ArmijoConfig, ArmijoStepResult, armijo_step, reset_step_size
from .armijo_optim import ArmijoSGD
from .armijo_training import armijo_local_train, make_closure
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig
from .dfw import DFW_PRESETS, DFWConfig, DFWServerStep, dfw_gamma, dfw_step
from .fedexp import fedexp_server_step, fedexp_step_size
from .scaffold import (
    ScaffoldCorrection,
    scaffold_client_control_update,
    scaffold_local_sgd,
    scaffold_server_update,
)
from .server import FedExPServer, FedLiLSServer, FedLiLUServer, ScaffoldServer
from .server_ls import gd_server_step, step_size_sync

__all__ = [
    "ArmijoConfig",
    "ArmijoSGD",
    "ArmijoStepResult",
    "DFWConfig",
    "DFWServerStep",
    "DFW_PRESETS",
    "FedExPConfig",
    "FedExPServer",
    "FedLiLSConfig",
    "FedLiLSServer",
    "FedLiLUConfig",
    "FedLiLUServer",
    "ScaffoldConfig",
    "ScaffoldCorrection",
    "ScaffoldServer",
    "aggregate_delta",
    "aggregation_weights",
    "armijo_local_train",
    "armijo_step",
    "check_finite_arrays",
    "dfw_gamma",
    "dfw_step",
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
]
