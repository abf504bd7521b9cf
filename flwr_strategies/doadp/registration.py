"""Registrations: ``doadp``, ``dmsgd`` (non-private) and the paper's baselines ``dpdo``, ``dp-dda``, ``cpgt``.

Method hyperparameters (``--set key=value``) are the fields of each config dataclass in
:mod:`.config` plus the graph (``topology``, ``neighbours``, ``weights``, ``failure_policy``). From the
experiment: the step size alpha is ``lr`` (with ``lr_decay`` for DO-ADP / D-mSGD), the batch size b is ``batch_size``, T is the number of
rounds (one round = one iteration), q is the smallest local dataset. ``lr="auto"`` (the private methods'
default on digits) lets each core derive its step once its noise is calibrated, so that one step's noise
norm is ``step_noise_norm`` (:func:`.config.auto_step`; DP-DDA's step 1/beta0 follows the same rule
through ``beta0=None``). Training settings a peer method
does not have are rejected before training: ``weight_decay`` (none in Algorithm 1), ``momentum`` (use
``--set beta=``), ``grad_clip`` (use ``--set clip=``), more than one local step or epoch per round,
and ``fraction_fit`` below 1 (every agent takes part every round).
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, register_method
from ..setup import ServerSetup

PAPER = ("Huo, Liu, Ding, Johansson, Shi, 'Decentralized Optimization with Amplified Privacy via "
         "Efficient Communication', arXiv 2506.07102")

_VIA = "paper: Sec. VI-A (logistic regression)"
_VIB = "paper: Sec. VI-B (CNN on MNIST)"
#: Why the default run on digits does not use the logistic-regression row's epsilon and batch.
_LR_ROW = ("the logistic-regression row (Sec. VI-A: eps 0.01, k/d 0.3, b 1, alpha 0.001, T = 120,000) is for "
           "20,000 records per agent; digits gives about 72, where eps 0.01 needs a noise std of about 150 per "
           "coordinate (Theorem 1) and b = 1 does not move the model in 200 iterations (measured: accuracy stays "
           "at chance)")

#: The paper's training settings (Sec. VI) where it states them. On the default dataset (scikit-learn
#: digits) the model is the paper's first workload, logistic regression (Sec. VI-A), with that row's
#: k/d; its epsilon, batch and step size do not fit 72 records per agent and 20 iterations (see each
#: source). The CNN row (Sec. VI-B, Table II) applies to every other model.
#: The step size of the private methods on digits: derived from the noise rule once sigma is known.
_AUTO_LR = ("auto: alpha such that one step's noise norm (DO-ADP: alpha sigma sqrt(d); DPDO, CPGT: sqrt(2 d) "
            "b0(alpha); DP-DDA: sigma sqrt(d) / beta0) is step_noise_norm, below the bound of about 2 "
            "(bench doadp_stepsize); the paper's alpha = 0.001 (Sec. VI-A) does not move the model in 20 "
            "iterations")
TRAIN_DEFAULTS = {
    "num_clients": (20, "paper: Sec. VI (n = 20 agents)"),
    "model": ({"digits": "logreg"}, "paper: Sec. VI-A (logistic regression, the paper's workload that fits digits; "
                                    "the CNN of Sec. VI-B is for MNIST)"),
    "lr": ({"digits": ("auto", f"project: {_AUTO_LR}"), "*": (0.01, f"{_VIB}: the paper's alpha = 0.01")}, _VIB),
    "batch_size": ({"digits": (32, f"project: {_LR_ROW}; 32 as for the CNN"),
                    "*": (32, "project: Sec. VI-B gives no batch size; 32 records per activated agent")}, _VIB),
    "local_steps": (1, "paper: Alg. 1 (one iteration per round: one local step)"),
    "fraction_fit": (1.0, "paper: Alg. 1 (every agent takes part, activated with probability p)"),
}
#: D-mSGD adds no noise, so no noise rule sets its step.
DMSGD_TRAIN_DEFAULTS = {
    **TRAIN_DEFAULTS,
    "lr": ({"digits": (1.0, "project: no noise, so no noise rule; one round is one iteration and at the paper's "
                            "alpha = 0.001 (Sec. VI-A) the 20 iterations of a default run do not move the model"),
            "*": (0.01, f"{_VIB}: the paper's alpha = 0.01")}, _VIB),
}

#: Hyperparameters whose default follows the model: the logistic-regression row (Sec. VI-A) or the
#: CNN row (Sec. VI-B, Table II).
#: Why the default run on digits uses epsilon 4: measured with the step-noise rule (lr auto), 20 agents, 20 rounds.
_EPS_DIGITS = ("project: digits gives about 72 records per agent (the CNN row's eps 1 is for 3,000); with the step "
               "from the noise rule, eps 1 moves the model too little in 20 iterations and eps 4 learns "
               "(python -m simulations.regen --print doadp-defaults)")
MODEL_DEFAULTS = {
    "epsilon": ("model", {
        "logreg": (4.0, f"{_EPS_DIGITS}; {_LR_ROW}"),
        "*": (1.0, f"{_VIB}: eps = 1 (Fig. 4, Table II)"),
    }),
    "k_frac": ("model", {
        "logreg": (0.3, f"{_VIA}: k/d = 0.3 with p = 0.8"),
        "*": (0.4, f"{_VIB}: k/d = 0.4 (Table II)"),
    }),
    "calibration": ("model", {
        "logreg": ("accountant", "project: Theorem 1 (Sec. IV) assumes epsilon <= 1; the accountant's sigma is the "
                                 "smallest a standard accountant certifies at the default epsilon 4"),
        "*": ("theorem1", "paper: Theorem 1 (Sec. IV)"),
    }),
    "delta0": ("model", {
        "logreg": (1e-8, "project: the paper gives none (Sec. VI-A); 1e-8 keeps Theorem 1's delta below 1e-2 at the "
                         "row's T = 120,000 (1e-5 makes it vacuous)"),
        "*": (1e-5, "project: the paper gives none (Sec. VI-B); 1e-5 keeps Theorem 1's delta small over a few "
                    "thousand iterations"),
    }),
}
#: The baselines' epsilon: the paper compares them at eps 0.01 on the logistic regression (Fig. 3).
BASELINE_EPSILON = ("model", {
    "logreg": (4.0, "project: Fig. 3 compares at eps = 0.01 on the logistic regression; eps 4 as DO-ADP's "
                    f"default on it ({_EPS_DIGITS})"),
    "*": (1.0, f"project: the paper runs the baselines only on the logistic regression (Fig. 3); eps 1 as DO-ADP's "
               "CNN row (Table II)"),
})

#: DPDO and CPGT on digits: their pure-DP Laplace noise on the broadcast model grows with the L1 sensitivity
#: (G sqrt(d) per clipped gradient, d = 650) and composes linearly over the rounds, so at DO-ADP's eps 4 the noise
#: rule leaves them a step 18-37 times smaller and they do not learn in 20 iterations (at eps 128 DPDO's step
#: equals DO-ADP's at eps 4).
LAPLACE_EPSILON = ("model", {
    "logreg": (512.0, "project: the smallest power of 2 at which DPDO's and CPGT's default runs learn with a margin "
                      "(pure-DP Laplace on d = 650 needs about 32 times DO-ADP's epsilon for the same step; at eps 4 "
                      "they do not learn: python -m simulations.regen --print doadp-defaults)"),
    "*": BASELINE_EPSILON[1]["*"],
})

_STRATEGY = "flwr_strategies.doadp.strategy:"


def check_train_settings(setup: ServerSetup, method: str) -> None:
    """Reject experiment settings a peer method does not have (clear error before training)."""
    tr = setup.train
    if setup.fraction_fit != 1.0:
        raise ValueError(f"{method} runs every agent every round; got fraction_fit={setup.fraction_fit}")
    if tr.weight_decay:
        raise ValueError(f"{method} has no weight decay (Algorithm 1); got weight_decay={tr.weight_decay}")
    if tr.momentum:
        raise ValueError(f"{method} has its own momentum (--set beta=...); got momentum={tr.momentum}")
    if tr.grad_clip is not None:
        raise ValueError(f"{method} clips per sample with --set clip=...; got grad_clip={tr.grad_clip}")
    for name in ("local_steps", "local_epochs"):
        value = getattr(tr, name)
        if value not in (None, 1):
            raise ValueError(f"{method}: one round is one iteration on one batch; got {name}={value}")
    if not setup.num_examples:
        raise ValueError(f"{method} needs the clients' dataset sizes (ServerSetup.num_examples) to calibrate its noise")


def _agents(method: str):
    """``core_arguments`` of ``method``: the experiment's agents, rounds, step and batch (after
    :func:`check_train_settings`), and its round config without ``lr``: the step size travels as the
    method's own key (``doadp_alpha``, ``dpdo_c``, ``cpgt_lr``), so an instruction carries one."""
    def core_arguments(setup: ServerSetup, params: dict) -> dict[str, Any]:
        check_train_settings(setup, method)
        fit_config = setup.fit_config
        return dict(num_partitions=setup.num_clients, num_rounds=setup.num_rounds,
                    dataset_size=int(min(setup.num_examples.values())), alpha=setup.train.lr,
                    batch_size=setup.train.batch_size, lr_decay=setup.train.lr_decay, seed=setup.seed,
                    on_train_config=lambda server_round: {k: v for k, v in fit_config(server_round).items()
                                                          if k != "lr"})

    return core_arguments


_BASELINE = " (baseline of " + PAPER + ")"
_CLIENTS = "flwr_strategies.clients."
#: ``(name, summary, paper, strategy class, client factory, overrides)``; every method but D-mSGD (no
#: noise) derives its step from the noise rule on digits (``lr="auto"``).
METHODS = (
    ("doadp", "DO-ADP: decentralized momentum SGD, Gaussian DP noise, random activation (p) and Top-k messages "
              "(k/d); certified epsilon reported (dp_epsilon at dp_delta) beside Theorem 1's",
     PAPER, "DOADP", "doadp:DOADPClient", MODEL_DEFAULTS),
    ("dmsgd", "Decentralized momentum SGD (NOT private; DO-ADP's network with p=1, k=d, no noise, no clipping)",
     PAPER, "DMSGD", "doadp:build_dmsgd_client", {}),
    ("dpdo", "DPDO (Huang et al. 2015), DO-ADP baseline: Laplace-perturbed broadcasts, decaying noise and step; "
             "pure eps-DP (certified)",
     "Huang, Mitra, Vaidya, ICDCN 2015" + _BASELINE, "DPDO", "doadp_baselines:DPDOClient",
     {"epsilon": LAPLACE_EPSILON}),
    ("dp-dda", "DP-DDA (Liu et al. 2024), DO-ADP baseline: private dual averaging with node sampling (p_s=0.24)",
     "Liu, Johansson, Shi, Automatica 2024" + _BASELINE, "DPDDA", "doadp_baselines:DPDDAClient",
     {"epsilon": BASELINE_EPSILON}),
    ("cpgt", "CPGT (Xie et al. 2023), DO-ADP baseline: compressed gradient tracking with Laplace noise "
             "(Top-k 0.12 per variable; heuristic, uncertified epsilon)",
     "Xie, Yi, Wang, Cao, Ren, IFAC 2023" + _BASELINE, "CPGT", "doadp_baselines:CPGTClient",
     {"epsilon": LAPLACE_EPSILON}),
)

for _name, _summary, _paper, _strategy, _client, _overrides in METHODS:
    _private = _name != "dmsgd"
    register_method(MethodSpec(
        name=_name, summary=_summary, paper=_paper, strategy=_STRATEGY + _strategy, overrides=_overrides,
        core_arguments=_agents(_name), client=_CLIENTS + _client,
        train_defaults=TRAIN_DEFAULTS if _private else DMSGD_TRAIN_DEFAULTS, extra={"auto_lr": True} if _private else {}))
