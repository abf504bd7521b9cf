"""Stochastic Armijo backtracking line search (FedLi-LS client, paper Alg. 3 + Alg. 4).

Paper: Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning", which uses the
stochastic line search of Vaswani et al. 2019 ("Painless Stochastic Gradient", the ``sls`` package).

One local step on a minibatch ``B``::

    loss0 = f_B(w);  g = grad f_B(w);  gn2 = ||g||^2
    eta   = reset(eta, k)
    repeat: w_try = w - eta * g ; accept if f_B(w_try) <= loss0 - c * eta * gn2 ; else eta *= beta

The trial losses are evaluated on the SAME minibatch (and, through the closure, the same RNG state),
so the search is deterministic given its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.declare import setting
from ..core.validation import SettingError, check_choice, check_integer, check_number

if TYPE_CHECKING:  # armijo_step imports torch, so that reading ArmijoConfig (FedLi's settings) does not
    import torch

__all__ = ["ArmijoConfig", "ArmijoStepResult", "GROWTH_RULES", "armijo_step", "reset_step_size"]

#: ``"paper"``: grow by ``delta ** (b / n_i)`` from step 2 (step 1 starts at ``eta_max``);
#: ``"sls"``: grow by ``delta ** (1 / sls_batches_per_epoch)`` at every step, step 1 included (the
#: ``sls`` package and the official code).
GROWTH_RULES = ("paper", "sls")
_SLS = "SLS/sls.py, the sls line search the official code runs"


@dataclass(frozen=True)
class ArmijoConfig:
    """Constants of the stochastic Armijo line search.

    The paper names these constants but gives no values; the defaults are the ``sls`` reference
    defaults that the authors' code uses (Vaswani et al. 2019, "Painless Stochastic Gradient").
    """

    eta_max: float = setting(1.0, "> 0, finite", f"official code: init_step_size = 1 ({_SLS}); Alg. 3 names "
                                                 "eta_lmax without a value",
                             "``eta_lmax``: the step size at the first local step of every round and the upper bound "
                             "on the step size after a reset (when ``cap_at_eta_max``).")
    armijo_c: float = setting(0.1, "(0, 1)", "official code: Sls(c=0.1) in "
                                             "fedml/ml/trainer/my_model_trainer_classification.py; Alg. 3 names c "
                                             "without a value",
                              "Sufficient-decrease constant ``c`` of the Armijo condition.")
    backtrack_factor: float = setting(0.9, "(0, 1)", f"official code: beta_b = 0.9 ({_SLS}); Alg. 3's beta",
                                      "``beta``: multiplier applied to the step size after each failed trial.")
    growth_factor: float = setting(2.0, ">= 1", f"official code: gamma = 2.0 ({_SLS}); Alg. 4's delta",
                                   "``delta``: growth used by reset option 2, ``eta * delta ** (b / n)``; finite.")
    reset_option: int = setting(2, "0, 1, 2", f"official code: reset_option = 1 ({_SLS}), the paper's opt 2 of Alg. 4",
                                "Paper numbering (``sls`` numbering in brackets): 0 = keep the previous step size "
                                "(sls 0), 1 = reset to ``eta_max`` every step (sls 2), 2 = grow by ``delta ** (b / n)`` "
                                "(sls 1).")
    max_backtracks: int = setting(100, ">= 1", f"official code: at most 100 trial steps ({_SLS})",
                                  "Maximum number of trials per step.")
    fallback_step: float = setting(1e-6, "> 0", f"official code: a step of 1e-6 when no trial is accepted ({_SLS})",
                                   "Step used when no trial is accepted (``w - fallback_step * g``); finite.")
    grad_tol: float = setting(1e-8, ">= 0", f"official code: no step when ||g|| < 1e-8 ({_SLS})",
                              "The parameters are left unchanged when ``||g|| < grad_tol``; finite.")
    cap_at_eta_max: bool = setting(True, "bool", "paper: Sec. 5 assumes step sizes <= eta_lmax; sls does not cap "
                                                 "(variant=code)",
                                   "Clamp the step size after a reset to ``eta_max`` (the theory's assumption). "
                                   "``False`` reproduces ``sls``.")
    growth_rule: str = setting("paper", "paper, sls", "paper: Alg. 4 (grow by delta^(b/n_i) from the second step); "
                                                      "sls's per-step rule is variant=code",
                               "How reset option 2 grows the step size between local steps. ``paper`` (paper Alg. "
                               "4): ``eta * delta ** (b / n_i)`` from step 2 on, step 1 exactly ``eta_max``. ``sls`` "
                               "(the ``sls`` package that the official code runs): ``eta * delta ** (1 / "
                               "sls_batches_per_epoch)`` at every step, step 1 included (step 1 starts at ``eta_max * "
                               "delta ** (1 / sls_batches_per_epoch)``). Combine with ``cap_at_eta_max=False`` to "
                               "reproduce the code exactly (:meth:`code`).")
    sls_batches_per_epoch: int = setting(500, ">= 1", f"official code: n_batches_per_epoch = 500 ({_SLS}; "
                                                      "growth_rule=sls only)",
                                         "The ``n_batches_per_epoch`` of ``growth_rule=\"sls\"``: ``sls``'s default "
                                         "500, which the official FedSLS code keeps (the FedLi v1 FedML trainer passes "
                                         "32).")

    def __post_init__(self) -> None:
        check_number("eta_max", self.eta_max, "a finite number > 0 (the maximum step size)", lambda v: v > 0)
        check_number("armijo_c", self.armijo_c, "a number in (0, 1)", lambda v: 0.0 < v < 1.0)
        check_number("backtrack_factor", self.backtrack_factor, "a number in (0, 1)", lambda v: 0.0 < v < 1.0)
        check_number("growth_factor", self.growth_factor, "a finite number >= 1", lambda v: v >= 1.0)
        if self.reset_option not in (0, 1, 2) or isinstance(self.reset_option, bool):
            raise SettingError("reset_option", self.reset_option, "0, 1 or 2 (paper numbering)")
        check_integer("max_backtracks", self.max_backtracks, 1)
        check_number("fallback_step", self.fallback_step, "a finite number >= 0", lambda v: v >= 0)
        check_number("grad_tol", self.grad_tol, "a finite number >= 0", lambda v: v >= 0)
        check_choice("growth_rule", self.growth_rule, GROWTH_RULES)
        check_integer("sls_batches_per_epoch", self.sls_batches_per_epoch, 1)

    @classmethod
    def code(cls, **overrides) -> ArmijoConfig:
        """The official code's line search: ``sls.Sls`` defaults (init step 1, c 0.1, beta 0.9, gamma 2,
        growth every step by ``2 ** (1/500)`` from step 1, no cap), as the FedSLS code instantiates it."""
        values = dict(eta_max=1.0, armijo_c=0.1, backtrack_factor=0.9, growth_factor=2.0, reset_option=2,
                      max_backtracks=100, fallback_step=1e-6, grad_tol=1e-8, cap_at_eta_max=False,
                      growth_rule="sls", sls_batches_per_epoch=500)
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_mapping(cls, values: dict) -> ArmijoConfig:
        """Build from a (Flower config) dict, ignoring unrelated keys and casting to the field types."""
        kwargs = {}
        for name, default in cls().__dict__.items():
            if name in values:
                value = values[name]
                if isinstance(default, bool) and isinstance(value, str):
                    low = value.strip().lower()
                    if low not in ("true", "false", "1", "0"):
                        raise ValueError(f"`{name}` must be a boolean, got {value!r}")
                    value = low in ("true", "1")
                kwargs[name] = type(default)(value)
        return cls(**kwargs)


def reset_step_size(eta: float, k: int, config: ArmijoConfig, batch_fraction: float) -> float:
    """Paper Alg. 4: the step size the first trial of local step ``k`` (1-based, per round) starts from.

    ``batch_fraction`` is ``b / n_i`` (minibatch size over local training-set size), used by option 2
    with ``growth_rule="paper"``. With ``growth_rule="sls"`` the growth exponent is
    ``1 / sls_batches_per_epoch`` and applies at every step: step 1 grows from ``eta_max``.
    """
    if k < 1:
        raise ValueError(f"local step counter `k` starts at 1, got {k}")
    if config.reset_option == 1:
        return float(config.eta_max)
    if config.growth_rule == "sls":
        base = float(config.eta_max) if k == 1 else float(eta)
        if config.reset_option == 0:
            return base
        e = base * float(config.growth_factor) ** (1.0 / float(config.sls_batches_per_epoch))
    else:
        if k == 1:
            return float(config.eta_max)
        if config.reset_option == 0:
            return float(eta)
        e = float(eta) * float(config.growth_factor) ** float(batch_fraction)
    return min(e, float(config.eta_max)) if config.cap_at_eta_max else e


@dataclass(frozen=True)
class ArmijoStepResult:
    """Outcome of one Armijo-SGD step.

    ``step_size``: the accepted step (or the last reduced value when no trial was accepted);
    ``loss``: the minibatch loss before the step; ``grad_norm_sq``: ``||g||^2``;
    ``trials``: number of trial evaluations; ``accepted``: a trial met the Armijo condition;
    ``skipped``: ``||g|| < grad_tol`` so nothing moved; ``fallback``: no trial accepted, ``w - fallback_step*g`` used.
    """

    step_size: float
    loss: float
    grad_norm_sq: float
    trials: int
    accepted: bool
    skipped: bool
    fallback: bool

    @property
    def backtracks(self) -> int:
        """Number of step-size reductions (failed trials)."""
        return self.trials - 1 if self.accepted else self.trials


def armijo_step(
    params: Sequence[torch.Tensor],
    closure: Callable[[], torch.Tensor],
    eta: float,
    k: int,
    config: ArmijoConfig,
    batch_fraction: float = 1.0,
) -> ArmijoStepResult:
    """Make one stochastic-Armijo SGD step on ``params`` in place.

    Parameters
    ----------
    params : sequence of torch.Tensor
        The trainable leaf tensors (``requires_grad=True``) that ``closure`` depends on.
    closure : callable () -> scalar tensor
        Evaluates the minibatch loss at the current ``params``. It must always evaluate the same
        minibatch under the same RNG state (see :func:`armijo_training.make_closure`).
    eta : float
        The step size accepted at the previous local step (ignored at ``k == 1``).
    k : int
        1-based local step counter within the current round.
    config : ArmijoConfig
        Line-search constants.
    batch_fraction : float
        ``b / n_i`` for reset option 2.

    Raises
    ------
    FloatingPointError
        If the loss or gradient at the current point is not finite (the model is left unchanged).
    """
    import torch

    for p in params:
        p.grad = None
    with torch.enable_grad():
        loss0_t = closure()
        loss0 = float(loss0_t.detach())
        if not math.isfinite(loss0):
            raise FloatingPointError(f"Armijo line search: non-finite minibatch loss {loss0} at local step {k}")
        loss0_t.backward()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    gn2 = float(sum(float(torch.sum(g.double() * g.double())) for g in grads))
    if not math.isfinite(gn2):
        raise FloatingPointError(f"Armijo line search: non-finite gradient norm at local step {k}")
    for p in params:
        p.grad = None

    eta = reset_step_size(eta, k, config, batch_fraction)
    if math.sqrt(gn2) < config.grad_tol:
        return ArmijoStepResult(eta, loss0, gn2, 0, True, True, False)

    c = float(config.armijo_c)
    trials = 0
    accepted = False
    with torch.no_grad():
        w0 = [p.detach().clone() for p in params]
        for _ in range(config.max_backtracks):
            for p, w, g in zip(params, w0, grads):
                p.copy_(w - eta * g)
            loss1 = float(closure())
            trials += 1
            # a non-finite trial loss fails the comparison and is backtracked like any other failure
            if loss1 <= loss0 - c * eta * gn2:
                accepted = True
                break
            eta = eta * config.backtrack_factor
        if not accepted:
            for p, w, g in zip(params, w0, grads):
                p.copy_(w - config.fallback_step * g)
    return ArmijoStepResult(eta, loss0, gn2, trials, accepted, False, not accepted)
