"""Validated hyperparameters of DO-ADP, D-mSGD and the paper's baselines (DPDO, DP-DDA, CPGT).

Paper: W. Huo, C. Liu, K. Ding, K. H. Johansson, L. Shi, "Decentralized Optimization with Amplified
Privacy via Efficient Communication" (arXiv 2506.07102). Defaults are the paper's CNN setting
(Sec. V-B, Table II) where it gives one; each field's source says so, or names the project's choice.

Every config is a frozen dataclass that validates itself on construction: an impossible value raises
``ValueError`` naming the setting and the value. Nothing is clamped.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from ..core.declare import setting
from ..privacy.accountant import SAMPLINGS
from ..privacy.validation import check_activation
from ..core.validation import check_choice, check_flag, check_integer, check_number, check_range
from .clipping import CLIP_MODES

_PAPER_VI = "paper: Sec. VI-A and VI-B"
_CLIP = "project: the paper gives no G (Assumption 2); G = 1"
_SAMPLING = "paper: Sec. VI-A (each agent samples its data points uniformly)"
_SIGMA = "project: None = calibrate sigma from epsilon"
_EVAL = "project: evaluate every round (and after the last)"
_PRIVATE = "project: evaluate the average of the public copies, inside the privacy guarantee"
_STEP = ("project: the noise norm one step adds, below the bound of about 2 above which steps diverged "
         "(bench doadp_stepsize); sets the step size when lr is auto")

__all__ = [
    "CALIBRATIONS",
    "DOADPConfig",
    "DMSGDConfig",
    "DPDOConfig",
    "DPDDAConfig",
    "CPGTConfig",
    "resolve_k",
    "STEP_NOISE_BOUND",
    "auto_step",
]

CALIBRATIONS = ("theorem1", "accountant")
#: The noise norm one step may add to a model: on Flower's quickstart CNN on MNIST, steps whose noise
#: norm exceeded about 2 diverged (``python -m simulations bench doadp_stepsize``). A step size of
#: ``"auto"`` keeps every method's per-step noise norm at ``step_noise_norm`` (a config field), below it.
STEP_NOISE_BOUND = 2.0
PUBLIC_COPIES = ("zero", "x0")
MSG_DTYPES = ("float32", "float64")


def auto_step(noise_norm_per_unit_step: float, step_noise_norm: float) -> float:
    """The step size whose per-step noise norm is ``step_noise_norm``, for a method whose noise norm
    grows linearly with its step (``alpha * sigma * sqrt(d)`` for DO-ADP; ``sqrt(2) b0(alpha) sqrt(d)``
    for the Laplace baselines, whose scale b0 is proportional to their step)."""
    if not (math.isfinite(noise_norm_per_unit_step) and noise_norm_per_unit_step > 0):
        raise ValueError(f"the noise norm of a unit step must be positive and finite, got {noise_norm_per_unit_step!r}")
    return float(step_noise_norm) / float(noise_norm_per_unit_step)


def _step_noise(value) -> float:
    v = check_range("step_noise_norm", value, 0, low_open=True)
    if v >= STEP_NOISE_BOUND:
        raise ValueError(f"step_noise_norm must lie below the divergence bound {STEP_NOISE_BOUND:g} "
                         f"(python -m simulations bench doadp_stepsize), got step_noise_norm={value!r}")
    return v


def _decays(rs, rn) -> None:
    """The Laplace baselines' step and noise decays: ``0 < rs < rn <= 1``."""
    if not 0.0 < check_number("rs", rs, "a finite real number") < check_number("rn", rn, "a finite real number") <= 1.0:
        raise ValueError(f"need 0 < rs < rn <= 1, got rs={rs!r}, rn={rn!r}")


def _check_gaussian(c) -> None:
    """The Gaussian mechanism's settings DO-ADP and DP-DDA share: clip mode, sampling, calibration,
    delta0, sigma; Theorem 1's calibration holds for epsilon <= 1 only (Huo et al., Theorem 1)."""
    check_choice("clip_mode", c.clip_mode, CLIP_MODES)
    check_choice("sampling", c.sampling, SAMPLINGS)
    check_choice("calibration", c.calibration, CALIBRATIONS)
    check_range("delta0", c.delta0, 0, 1, low_open=True, high_open=True)
    if c.sigma is not None:
        check_range("sigma", c.sigma, 0, low_open=True)
    if c.calibration == "theorem1" and c.sigma is None and c.epsilon > 1.0:
        raise ValueError(f"calibration='theorem1' needs epsilon <= 1 (Theorem 1 of Huo et al.), got epsilon="
                         f"{c.epsilon!r}; use calibration='accountant'")


def resolve_k(k_frac: float, d: int) -> int:
    """Number of Top-k coordinates ``round(k_frac * d)``; raises when that is 0 (no silent clamping)."""
    k = int(round(float(k_frac) * int(d)))
    if k < 1:
        raise ValueError(
            f"k_frac={k_frac!r} keeps round({k_frac!r} * d={d}) = 0 coordinates; use k_frac >= {0.5 / d:.3g}"
        )
    return min(k, int(d))


@dataclass(frozen=True)
class DOADPConfig:
    """DO-ADP hyperparameters."""

    epsilon: float = setting(1.0, "> 0", "paper: Sec. VI-B (eps = 1, Fig. 4, Table II)",
                             "Target privacy budget of every agent over the whole run; finite. With "
                             "``calibration=\"theorem1\"`` also <= 1 (Theorem 1 assumes it).")
    delta: float = setting(1e-5, "(0, 1)", "project: the paper states no delta for the certified guarantee; 1e-5",
                           "Target delta of the certified guarantee.")
    p: float = setting(0.8, "(0, 1], >= 1/2 unless allow_low_p", f"{_PAPER_VI} (p = 0.8)", "Activation probability "
                       "of an agent per iteration (the convergence proof needs p >= 1/2; ``allow_low_p=True`` accepts "
                       "(0, 1/2)). Drawn by each client from its private randomness.")
    k_frac: float = setting(0.4, "(0, 1]", "paper: Sec. VI-B (k/d = 0.4, Table II)",
                            "Fraction k/d of coordinates in a Top-k message; k = round(k_frac * d) must be >= 1.")
    gamma: float = setting(0.05, "> 0", f"{_PAPER_VI} (gamma = 0.05)", "Consensus step size; finite.")
    beta: float = setting(0.15, "[0, 1)", f"{_PAPER_VI} (beta = 0.15)", "Momentum factor.")
    clip: float = setting(1.0, "> 0", _CLIP,
                          "G: per-sample gradients are clipped to ``|g_j| <= G/sqrt(d)`` per coordinate "
                          "(``clip_mode=\"coordinate\"``, Assumption 2) or to L2 norm G (``l2``); finite.")
    clip_mode: str = setting("coordinate", "coordinate, l2", "paper: Assumption 2 (|g_j| <= G/sqrt(d) per "
                                                             "coordinate), which Sec. IV's sqrt(k/d) sensitivity needs",
                             "``coordinate`` or ``l2`` (see ``clip``).")
    sampling: str = setting("uniform", "a name of SAMPLINGS", _SAMPLING,
                            "How an active agent draws its batch from its q records: ``uniform`` (b distinct "
                            "records; the RDP accountant certifies it) or ``poisson`` (each record with probability "
                            "b/q; the PLD accountant certifies it).")
    calibration: str = setting("theorem1", "theorem1, accountant", "paper: Theorem 1 (Sec. IV)",
                               "Where sigma comes from. ``theorem1``: the paper's Theorem 1 (``max(sigma_thm, "
                               "sigma_floor)``, which credits the factors p^2 and k/d). The run is refused when a "
                               "standard accountant certifies less than (epsilon, delta) for that sigma. "
                               "``accountant``: the smallest sigma a standard accountant certifies at (epsilon, "
                               "delta) over the planned rounds.")
    delta0: float = setting(1e-5, "(0, 1)", "project: the paper gives none (Sec. VI-B); 1e-5 keeps Theorem 1's delta "
                                            "small over a few thousand iterations",
                            "Per-step delta of Theorem 1's chain (only used by ``calibration=\"theorem1\"`` and the "
                            "Theorem 1 bound reported beside the certified one).")
    sigma: float | None = setting(None, "> 0 or None", _SIGMA,
                                  "Noise std per coordinate given directly, instead of calibrating. The certified "
                                  "epsilon at ``delta`` is then reported (and must not exceed ``epsilon``).")
    public_copy: str = setting("zero", "zero, x0", "paper: Alg. 1 (the public copies start at 0)",
                               "Initial public copies: ``zero`` (paper) or ``x0`` (x0 is public anyway).")
    eval_every: int = setting(1, ">= 1", _EVAL,
                              "Central evaluation every this many rounds (round 0, the initial model, and the last "
                              "round are always evaluated). Long runs such as the paper's 2,000 iterations may set "
                              "10.")
    evaluate_private: bool = setting(False, "bool", _PRIVATE,
                                     "Simulation only, OUTSIDE the privacy guarantee: in evaluation rounds the "
                                     "server asks the clients for their private models x_i (config ``report_model = "
                                     "1``) and evaluates the average of those it receives (the paper's xbar). A "
                                     "client sends its model only when its own node config consents; the server's "
                                     "request alone releases nothing. By default the server evaluates the average of"
                                     " the public copies, a post-processing of the private messages (inside the "
                                     "guarantee).")
    msg_dtype: str = setting("float32", "float32, float64", "project: float32 messages; both ends apply the same "
                                                            "rounded values",
                             "dtype of the transmitted values; both ends apply the same rounded values.")
    allow_low_p: bool = setting(False, "bool", "paper: Theorem 2 needs p >= 1/2 (Sec. V)", "Accept 0 < p < 1/2.")
    step_noise_norm: float = setting(1.5, "(0, STEP_NOISE_BOUND)", _STEP,
                                     "With the step size ``\"auto\"`` (``lr=\"auto\"``), alpha is ``step_noise_norm "
                                     "/ (sigma sqrt(d))`` once sigma is calibrated: the norm of the noise one step "
                                     "adds to a model (below :data:`STEP_NOISE_BOUND`). Unused when a step size is "
                                     "given.")

    def __post_init__(self) -> None:
        check_range("epsilon", self.epsilon, 0, low_open=True)
        _step_noise(self.step_noise_norm)
        check_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        check_activation(self.p, allow_low_p=self.allow_low_p)
        check_range("k_frac", self.k_frac, 0, 1, low_open=True)
        check_range("gamma", self.gamma, 0, low_open=True)
        check_range("beta", self.beta, 0, 1, high_open=True)
        check_range("clip", self.clip, 0, low_open=True)
        _check_gaussian(self)
        check_choice("public_copy", self.public_copy, PUBLIC_COPIES)
        check_integer("eval_every", self.eval_every, 1)
        check_flag("evaluate_private", self.evaluate_private)
        check_choice("msg_dtype", self.msg_dtype, MSG_DTYPES)
        if self.p < 0.5:
            warnings.warn(f"DO-ADP: p={self.p} < 1/2 is outside the paper's convergence analysis", stacklevel=3)


@dataclass(frozen=True)
class DMSGDConfig:
    """Non-private decentralized momentum SGD (eq. (2) of Huo et al.; DO-ADP with p = 1, k = d,
    no noise and no clipping). The only way to run DO-ADP's network without privacy."""

    gamma: float = setting(0.05, "> 0", f"{_PAPER_VI} (gamma = 0.05)", "Consensus step size.")
    beta: float = setting(0.15, "[0, 1)", f"{_PAPER_VI} (beta = 0.15)", "Momentum factor.")
    eval_every: int = setting(1, ">= 1", _EVAL,
                              "Central evaluation period (and always after round 0 and the last round).")
    msg_dtype: str = setting("float64", "float32, float64", "project: float64 messages (no privacy, no compression)",
                             "dtype of the transmitted model.")

    def __post_init__(self) -> None:
        check_range("gamma", self.gamma, 0, low_open=True)
        check_range("beta", self.beta, 0, 1, high_open=True)
        check_integer("eval_every", self.eval_every, 1)
        check_choice("msg_dtype", self.msg_dtype, MSG_DTYPES)


@dataclass(frozen=True)
class _BaselinePrivacy:
    epsilon: float = setting(1.0, "> 0", "project: the host paper (DO-ADP) runs its baselines only on the logistic "
                                         "regression (Fig. 3); eps 1 as DO-ADP's CNN row (Table II)",
                             "Privacy budget of the run.")
    clip: float = setting(1.0, "> 0", _CLIP, "G, the bound on each per-sample gradient: ``|g_j| <= G/sqrt(d)`` per "
                                             "coordinate (DP-DDA: as its ``clip_mode`` says).")
    eval_every: int = setting(1, ">= 1", _EVAL,
                              "Central evaluation every this many rounds (round 0 and the last round are always "
                              "evaluated).")
    evaluate_private: bool = setting(False, "bool", _PRIVATE,
                                     "Simulation only, OUTSIDE the privacy guarantee: evaluate the average of the "
                                     "agents' private models, as :class:`DOADPConfig`.")
    step_noise_norm: float = setting(1.5, "(0, STEP_NOISE_BOUND)", _STEP,
                                     "With the step size ``\"auto\"``, the norm of the noise the first step adds "
                                     "(below :data:`STEP_NOISE_BOUND`).")

    def _check_common(self) -> None:
        check_range("epsilon", self.epsilon, 0, low_open=True)
        _step_noise(self.step_noise_norm)
        check_range("clip", self.clip, 0, low_open=True)
        check_integer("eval_every", self.eval_every, 1)
        check_flag("evaluate_private", self.evaluate_private)


@dataclass(frozen=True)
class DPDOConfig(_BaselinePrivacy):
    """DPDO (Huang, Mitra, Vaidya, ICDCN 2015), DO-ADP's baseline (Huo et al., Sec. V-A, Table I):
    broadcast ``y = x + Laplace(b0 rn^t)``, mix ``z = W y``, step ``x = z - c rs^t g(z)`` on a
    per-sample-clipped minibatch gradient. Pure epsilon-DP: ``epsilon`` is the pure-DP budget over
    an unbounded horizon. With the step size ``"auto"``, c is chosen so that the first broadcast's
    Laplace noise has norm ``sqrt(2) b0 sqrt(d) = step_noise_norm`` (b0 is proportional to c)."""

    rs: float = setting(0.99, "0 < rs < rn", "project: Huang et al. (ICDCN 2015) leave the step decay free; 0.99 < rn",
                        "Step-size decay.")
    rn: float = setting(0.995, "rs < rn <= 1", "project: Huang et al. (ICDCN 2015) leave the noise decay free; "
                                               "rs < 0.995 <= 1",
                        "Noise decay.")

    def __post_init__(self) -> None:
        self._check_common()
        _decays(self.rs, self.rn)


@dataclass(frozen=True)
class DPDDAConfig(_BaselinePrivacy):
    """DP-DDA (Liu, Johansson, Shi, Automatica 2024), DO-ADP's baseline (Huo et al., Sec. V-A, Table I):
    node sampling with probability ``p_s``, Gaussian noise on a clipped minibatch gradient, dual
    averaging ``z = W z + gtil``, ``x = -z / (A_t reg + beta0 sqrt(t+1))``; every node transmits.
    (epsilon, delta) is the target a standard accountant certifies (no credit for p_s: a non-sampled
    node adds exactly 0, which an observer of consecutive z's sees). ``clip`` bounds each per-sample
    gradient's L2 norm with ``clip_mode="l2"``, ``|g_j| <= G/sqrt(d)`` per coordinate with
    ``"coordinate"``: either way a clipped gradient has L2 norm at most G, so sigma and the reported
    epsilon do not depend on the mode. ``step_noise_norm`` sets beta0 when it is None."""

    delta: float = setting(1e-5, "(0, 1)", "project: the papers state no delta; 1e-5",
                           "Target delta of the certified guarantee.")
    p_s: float = setting(0.24, "(0, 1]", "paper: host paper (DO-ADP) Sec. VI-A: DP-DDA's node sampling ratio 24%, "
                                         "matching DO-ADP's resource use (Fig. 3)",
                         "Node sampling probability.")
    beta0: float | None = setting(None, "> 0 or None", "project: None = sigma sqrt(d) / step_noise_norm (1/beta0 is "
                                                       "the step: the noise norm rule); beta_t = beta0 sqrt(t+1)",
                                  "Proximal coefficient scale beta_t = beta0 sqrt(t+1) (1/beta0 is the step size). "
                                  "None: ``beta0 = sigma sqrt(d) / step_noise_norm``, so the noise that reaches x "
                                  "(``z`` carries ``sqrt(t)`` steps of noise, divided by ``beta0 sqrt(t+1)``) has "
                                  "norm below ``step_noise_norm``.")
    reg: float | None = setting(None, ">= 0 or None", "paper: host paper (DO-ADP) Sec. VI-A (the shared regulariser "
                                                     "||x||^2/(2q)); None = 1/q",
                                "Coefficient of the shared regulariser h(x) = reg ||x||^2/2; None = 1/q.")
    clip_mode: str = setting("l2", "l2, coordinate", "project: Liu, Johansson, Shi assume Lipschitz losses (a "
                                                     "Euclidean bound on the subgradients); DO-ADP's per-coordinate "
                                                     "bound (host paper Assumption 2) buys no noise at k = d",
                             "``l2`` or ``coordinate``. Liu, Johansson and Shi bound the subgradients in the "
                             "Euclidean norm (Lipschitz losses), and DP-DDA transmits every coordinate (k = d), so "
                             "DO-ADP's per-coordinate bound (its Assumption 2, which its Top-k sensitivity needs) "
                             "buys no noise here. It also costs signal: clamping a softmax per-sample gradient "
                             "coordinate by coordinate breaks its zero sum over the classes, and the "
                             "class-independent part that remains swamps the part that separates them.")
    sampling: str = setting("uniform", "a name of SAMPLINGS", _SAMPLING, "As :class:`DOADPConfig`.")
    calibration: str = setting("accountant", "accountant, theorem1",
                               "project: a standard accountant (node sampling not credited, as in the reported "
                               "epsilon); DO-ADP's Theorem 1 chain with p = p_s credits p_s^2 and is refused at these "
                               "settings",
                               "``accountant``: the smallest sigma a standard accountant certifies (node sampling is"
                               " not credited, as in the reported epsilon); ``theorem1``: DO-ADP's Theorem 1 chain "
                               "(Huo et al.) with p = p_s and k = d, which credits p_s^2 and is refused when a "
                               "standard accountant certifies less than (epsilon, delta) (at p_s = 0.24 it always is"
                               " at epsilon <= 1).")
    delta0: float = setting(1e-5, "(0, 1)", "project: the papers give none; 1e-5",
                            "Per-step delta of the Theorem 1 chain.")
    sigma: float | None = setting(None, "> 0 or None", _SIGMA,
                                  "Noise std given directly instead of calibrating at (epsilon, delta).")

    def __post_init__(self) -> None:
        self._check_common()
        check_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        check_range("p_s", self.p_s, 0, 1, low_open=True)
        if self.beta0 is not None:
            check_range("beta0", self.beta0, 0, low_open=True)
        if self.reg is not None:
            check_range("reg", self.reg, 0)
        _check_gaussian(self)


@dataclass(frozen=True)
class CPGTConfig(_BaselinePrivacy):
    """CPGT (Xie, Yi, Wang, Cao, Ren, IFAC 2023), DO-ADP's baseline (Huo et al., Sec. V-A, Table I):
    compressed gradient tracking with Laplace noise on both transmitted variables before Top-k.
    ``epsilon`` is the nominal pure-DP budget of a heuristic calibration (NOT certified, see
    :class:`~flwr_strategies.doadp.baseline_server.CPGTServer`); ``step_noise_norm`` as
    :class:`DPDOConfig` (b0 is proportional to lr)."""

    k_frac: float = setting(0.12, "(0, 1]", "paper: host paper (DO-ADP) Sec. VI-A: CPGT's k/d = 0.12 per variable, "
                                            "matching DO-ADP's 24% (Fig. 3)",
                            "Top-k fraction per variable.")
    a: float = setting(0.5, "(0, 1]", "project: Xie et al. (IFAC 2023) leave the reference step free; 0.5",
                       "Reference update rate a_x = a_y.")
    g_cons: float = setting(0.05, "> 0", "project: the consensus step of DO-ADP (gamma = 0.05, host paper Sec. VI)",
                            "Consensus step g_x = g_y.")
    rs: float = setting(0.999, "0 < rs < rn",
                        "project: Xie et al. (IFAC 2023) leave the step decay free; 0.999 < rn", "Step-size decay.")
    rn: float = setting(0.9995, "rs < rn <= 1",
                        "project: Xie et al. (IFAC 2023) leave the noise decay free; rs < 0.9995 <= 1", "Noise decay.")

    def __post_init__(self) -> None:
        self._check_common()
        check_range("k_frac", self.k_frac, 0, 1, low_open=True)
        check_range("a", self.a, 0, 1, low_open=True)
        check_range("g_cons", self.g_cons, 0, low_open=True)
        _decays(self.rs, self.rn)
