"""FedLi-LU server: one Deep Frank-Wolfe step on the pseudo-gradient (FedLi paper, Algorithm 2 and
Appendix A.2).

The DFW step of Berrada et al. 2019 with ``Delta_t`` in place of the loss gradient and the weighted
mean client loss ``f_t^g`` in place of the loss value::

    r     = lambda * w_t
    gamma = clip((f - eta * <Delta, r>) / (eta * ||Delta||^2 + eps), 0, 1)     # bracket as in the DFW paper
    w    <- w_t - eta * (r + gamma * Delta)
    if mu > 0:  z <- mu * z - eta * gamma * (Delta + r);  w <- w + mu * z         # DFW momentum (server state)

Norms and inner products run over the concatenation of all floating arrays of the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.declare import setting
from ..core.validation import check_range, require_finite

import numpy as np

from .aggregation import is_float_array

__all__ = ["DFW_PRESETS", "DFWConfig", "DFWServerStep", "dfw_gamma", "dfw_step"]


@dataclass(frozen=True)
class DFWConfig:
    """Hyper-parameters of the FedLi-LU server step."""

    server_eta: float = setting(1.0, "> 0, finite", "paper: App. C (eta_g = 1 for all our algorithms)",
                                "``eta``, DFW's proximal coefficient (the server learning rate); the effective "
                                "scaling of ``Delta_t`` is ``eta * gamma`` in ``[0, eta]``. Authors' code: 0.01.")
    server_weight_decay: float = setting(1e-3, ">= 0, finite", "paper: App. C (weight decay 1e-3), the lambda of "
                                                               "Alg. 2",
                                         "``lambda`` of the regulariser ``(lambda/2)||w||^2``. Authors' code: 1e-5.")
    server_momentum: float = setting(0.0, "[0, 1)", "paper: Alg. 2 has no momentum (the official "
                                                    "fedml/fedopt/FEDDFW.py uses 0.9: variant=code)",
                                     "``mu``, DFW momentum (not in paper Alg. 2). Authors' code: 0.9.")
    dfw_eps: float = setting(1e-5, "> 0, finite", "official code: eps = 1e-5 in fedml/fedopt/FEDDFW.py (Alg. 2 "
                                                  "names none)",
                             "Stabiliser added to the denominator (> 0 keeps ``Delta_t = 0`` safe).")

    def __post_init__(self) -> None:
        for name in ("server_eta", "dfw_eps"):
            check_range(name, getattr(self, name), 0.0, low_open=True)
        check_range("server_weight_decay", self.server_weight_decay, 0.0)
        check_range("server_momentum", self.server_momentum, 0.0, 1.0, high_open=True)

    @classmethod
    def preset(cls, name: str) -> DFWConfig:
        """``"paper"`` (Algorithm 2 gives no values: eta = 1 as the appendix uses for
        every FedLi method, lambda 1e-3, no momentum) or ``"authors_code"`` / ``"code"`` (the authors'
        FedML code: eta 0.01, lambda 1e-5, mu 0.9)."""
        if name not in DFW_PRESETS:
            raise ValueError(f"unknown DFW preset {name!r}; choose one of {sorted(DFW_PRESETS)}")
        return DFW_PRESETS[name]


DFW_PRESETS: dict[str, DFWConfig] = {
    "paper": DFWConfig(server_eta=1.0, server_weight_decay=1e-3, server_momentum=0.0, dfw_eps=1e-5),
    "authors_code": DFWConfig(server_eta=0.01, server_weight_decay=1e-5, server_momentum=0.9, dfw_eps=1e-5),
}
DFW_PRESETS["code"] = DFW_PRESETS["authors_code"]


def dfw_gamma(f: float, delta: np.ndarray, r: np.ndarray, eta: float, eps: float) -> float:
    """``clip((f - eta <delta, r>) / (eta ||delta||^2 + eps), 0, 1)`` for flat float64 vectors."""
    return _gamma(f, float(np.dot(delta, delta)), float(np.dot(delta, r)), eta, eps)


def _gamma(f: float, dd: float, dr: float, eta: float, eps: float) -> float:
    # the clipped DFW ratio from ||Delta||^2 = dd and <Delta, r> = dr
    if not math.isfinite(f):
        raise FloatingPointError(f"FedLi-LU: non-finite pseudo-objective f_t^g = {f!r}")
    num = float(f) - eta * dr
    den = eta * dd + eps
    if not (math.isfinite(num) and math.isfinite(den)):
        raise FloatingPointError(f"FedLi-LU: non-finite DFW ratio ({num!r} / {den!r})")
    return float(min(1.0, max(0.0, num / den)))


def dfw_step(
    global_arrays: Sequence[np.ndarray],
    average: Sequence[np.ndarray],
    f: float,
    config: DFWConfig,
    momentum_buffer: np.ndarray | None = None,
    float_mask: Sequence[bool] | None = None,
) -> tuple[list[np.ndarray], np.ndarray | None, dict[str, float]]:
    """One DFW step as a pure function: ``(new arrays, new momentum buffer, info)``; nothing is modified.

    ``global_arrays`` is ``w_t``; ``average`` is the weighted average of the client models (so
    ``Delta_t = w_t - average``); ``f`` is ``f_t^g``; ``momentum_buffer`` is ``z`` (flat float64 over
    the updated arrays; None = zeros). Arrays with ``float_mask[j] == False`` (and all non-float
    arrays) take the plain average. The new arrays keep their input dtypes; the buffer is None when
    ``mu == 0``.

    ``info``: ``gamma`` (clipped to [0, 1]), ``gamma_raw`` (the ratio before clipping), ``polyak_ratio``
    ``f / (eta ||Delta||^2 + eps)`` (the ratio without the regulariser; values far above 1 mean gamma
    is clipped at 1 and the step is FedAvg's, see :class:`~flwr_strategies.fedli.server.FedLiLUServer`),
    ``effective_scale`` (``eta * gamma``), ``delta_norm`` and ``f_g``.

    ``Delta_t = 0`` is safe: the denominator is ``eps`` and the update reduces to ``w - eta*r`` (plus
    momentum). Non-finite inputs raise ``FloatingPointError``; the model is never set to NaN.
    """
    cfg = config
    if len(global_arrays) != len(average):
        raise ValueError(f"global model has {len(global_arrays)} arrays, average has {len(average)}")
    require_finite("global model", global_arrays)
    require_finite("aggregated client models", average)
    idx = [j for j, w in enumerate(global_arrays)
           if is_float_array(w) and (float_mask is None or bool(float_mask[j]))]
    if not idx:
        raise ValueError("FedLi-LU: the model has no floating-point arrays to update")
    lam, eta, mu = cfg.server_weight_decay, cfg.server_eta, cfg.server_momentum

    def parts(j: int) -> tuple[np.ndarray, np.ndarray]:
        w = np.asarray(global_arrays[j], dtype=np.float64).ravel()
        return w, w - np.asarray(average[j], dtype=np.float64).ravel()

    # pass 1: the scalars (one array at a time: no model-sized float64 temporaries)
    dd = dw = 0.0
    for j in idx:
        w, d = parts(j)
        dd += float(np.dot(d, d))
        dw += float(np.dot(d, w))
    dr = lam * dw  # <Delta, r> with r = lambda * w
    gamma = _gamma(f, dd, dr, eta, cfg.dfw_eps)
    den = eta * dd + cfg.dfw_eps
    # pass 2: the update, array by array
    chosen = set(idx)
    out = [a if j in chosen else np.array(a, copy=True) for j, a in enumerate(average)]
    z_new = np.empty(sum(np.asarray(global_arrays[j]).size for j in idx)) if mu > 0 else None
    z_old = momentum_buffer if momentum_buffer is not None and z_new is not None and momentum_buffer.shape == z_new.shape else None
    offset = 0
    for j in idx:
        ref = np.asarray(global_arrays[j])
        w, d = parts(j)
        new = w - eta * (lam * w + gamma * d)
        if z_new is not None:
            z = -eta * gamma * (d + lam * w)
            if z_old is not None:
                z += mu * z_old[offset: offset + w.size]
            z_new[offset: offset + w.size] = z
            new += mu * z
        if not np.all(np.isfinite(new)):
            raise FloatingPointError("FedLi-LU: DFW update produced non-finite weights")
        out[j] = new.reshape(ref.shape).astype(ref.dtype)
        offset += w.size
    info = {
        "gamma": gamma,
        "gamma_raw": (float(f) - eta * dr) / den,
        "polyak_ratio": float(f) / den,
        "effective_scale": eta * gamma,
        "delta_norm": float(np.sqrt(dd)),
        "f_g": float(f),
    }
    return out, z_new, info


class DFWServerStep:
    """Stateful DFW server update (keeps the momentum buffer ``z`` across rounds when ``mu > 0``);
    a thin wrapper over :func:`dfw_step`."""

    def __init__(self, config: DFWConfig | None = None) -> None:
        self.config = config if config is not None else DFWConfig()
        self.momentum_buffer: np.ndarray | None = None

    def step(
        self,
        global_arrays: Sequence[np.ndarray],
        average: Sequence[np.ndarray],
        f: float,
        float_mask: Sequence[bool] | None = None,
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Apply one DFW step (see :func:`dfw_step`); the buffer changes only when the step succeeds."""
        out, z, info = dfw_step(global_arrays, average, f, self.config, self.momentum_buffer, float_mask)
        if z is not None:
            self.momentum_buffer = z
        return out, info
