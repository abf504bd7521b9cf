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

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".aggregation": ("aggregate_delta", "aggregation_weights", "function_sync", "weighted_average"),
    ".armijo": ("ArmijoConfig", "ArmijoStepResult", "armijo_step", "reset_step_size"),
    ".armijo_optim": ("ArmijoSGD",),
    ".armijo_training": ("armijo_local_train", "make_closure"),
    ".config": ("FedExPConfig", "FedLiLSConfig", "FedLiLUConfig", "ScaffoldConfig"),
    ".dfw": ("DFW_PRESETS", "DFWConfig", "DFWServerStep", "dfw_gamma", "dfw_step"),
    ".fedexp": ("fedexp_server_step", "fedexp_step_size"),
    ".scaffold": ("ScaffoldCorrection", "scaffold_client_control_update", "scaffold_local_sgd",
                  "scaffold_server_update"),
    ".server": ("FedExPServer", "FedLiLSServer", "FedLiLUServer", "ScaffoldServer"),
    ".server_ls": ("gd_server_step", "step_size_sync"),
})
__all__ = sorted(_EXPORTS)
