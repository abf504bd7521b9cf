"""Layer selection, per-layer factor sizes and the whole-model ratio search of FedMUD.

Li et al., ICML 2025 (Sections 3.1-3.3 and 5.1, Appendix B). A compressed layer's weight is
viewed as an ``m x n`` matrix: ``nn.Linear(in, out)`` -> ``m = out, n = in``; ``nn.Conv2d`` with
kernel ``kh x kw`` -> ``m = c_out * kh, n = c_in * kw`` (row-major reshape, no permutation).
The first and the last linear/conv layer (registration order) stay dense, as do normalisation
parameters and biases.

Size formulas at per-layer ratio ``rho`` (``N = m * n``):

* ``mat`` with pattern ``ab`` or ``aad``: ``r = max(1, ceil(rho*m*n/(m+n)))``, sends ``r*(m+n)``;
* ``mat`` with ``freeze`` (+F): ``r = max(1, ceil(rho*m*n/n))``, sends ``r*n``;
* ``kron`` with ``ab`` or ``aad``: ``nb = ceil(rho^2*N/4)``, ``z`` minimal with ``nb*z^4 >= N``,
  sends ``2*nb*z^2``;
* ``kron`` with ``freeze``: the block formula at ``2*rho``, sends ``nb*z^2``;
* ``hadamard`` (FedPara baseline): ``r = max(1, ceil(rho*m*n/(2(m+n))))``, sends ``2*r*(m+n)``.

The whole-model ratio ``P_payload / P_dense`` is matched with the reference code's "force" loop:
start at ``rho = target`` and subtract 0.001 while ``ratio - target > 0.001`` (and ``rho`` stays
positive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from torch import nn

from ..core.validation import check_choice
from .config import DECOMPS, PATTERNS, validate_ratio
from .kron import bkd_blocks

__all__ = [
    "DECOMPS",
    "PATTERNS",
    "LayerPlan",
    "ModelPlan",
    "UnreachableRatioError",
    "compressible_layers",
    "layer_view",
    "plan_layer",
    "plan_at_rho",
    "plan_model",
    "smallest_reachable_ratio",
    "validate_ratio",
]

_FORCE_STEP = 0.001
_FORCE_TOL = 0.001


class UnreachableRatioError(ValueError):
    """The requested whole-model ratio is below the smallest ratio the model can reach."""


def _scheme(decomp: str, pattern: str) -> str:
    check_choice("decomp", decomp, DECOMPS)
    check_choice("pattern", pattern, PATTERNS)
    if decomp == "hadamard" and pattern != "ab":
        raise ValueError(f"decomp='hadamard' (FedPara) supports only pattern='ab', got {pattern!r}")
    return f"{decomp}-{pattern}"


def layer_view(name: str, module: nn.Module) -> tuple[int, int]:
    """The ``(m, n)`` matrix view of a linear or conv layer's weight; errors name the layer."""
    if isinstance(module, nn.Linear):
        return module.out_features, module.in_features
    if isinstance(module, nn.Conv2d):
        if module.groups != 1:
            raise ValueError(
                f"layer {name!r} is a grouped convolution (groups={module.groups}); the (c_out*kh) x (c_in*kw) "
                "view of the decomposition needs groups == 1: keep it dense (skip it) instead"
            )
        c_out, c_in, kh, kw = module.weight.shape
        return c_out * kh, c_in * kw
    raise ValueError(
        f"layer {name!r} of type {type(module).__name__} cannot be decomposed: only nn.Linear and nn.Conv2d are supported"
    )


def compressible_layers(
    model: nn.Module,
    skip_first: int = 1,
    skip_last: int = 1,
    include: Sequence[str] | None = None,
) -> list[tuple[str, nn.Module]]:
    """Linear/conv layers to compress, in module-registration order.

    Parameters
    ----------
    model : nn.Module
        The (plain) model.
    skip_first, skip_last : int (default 1, >= 0)
        How many of the first / last linear-or-conv layers stay dense (paper: first and last).
    include : sequence of str, optional
        Explicit module names to compress instead (each must be ``nn.Linear`` or ``nn.Conv2d``).
    """
    if include is not None:
        modules = dict(model.named_modules())
        out = []
        for name in include:
            if name not in modules:
                raise ValueError(f"layer {name!r} not found in the model")
            layer_view(name, modules[name])
            out.append((name, modules[name]))
        return out
    if skip_first < 0 or skip_last < 0:
        raise ValueError(f"skip_first and skip_last must be >= 0, got {skip_first}, {skip_last}")
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    chosen = layers[skip_first : len(layers) - skip_last]
    for name, module in chosen:
        layer_view(name, module)
    return chosen


@dataclass(frozen=True)
class LayerPlan:
    """Factor sizes of one compressed layer.

    ``rank`` is ``r`` for ``mat``/``hadamard`` and the block count ``nb`` for ``kron``; ``side`` is the
    Kronecker factor side ``z`` (0 for the matrix forms). ``payload`` is the number of trainable
    scalars exchanged per direction.
    """

    name: str
    shape: tuple[int, ...]
    m: int
    n: int
    decomp: str
    pattern: str
    rank: int
    side: int
    payload: int

    def factor_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Shapes of the left (U / A) and right (V / B) factor."""
        if self.decomp == "kron":
            return (self.rank, self.side, self.side), (self.rank, self.side, self.side)
        return (self.m, self.rank), (self.rank, self.n)


def plan_layer(name: str, shape: Sequence[int], m: int, n: int, decomp: str, pattern: str, rho: float) -> LayerPlan:
    """Factor sizes of one layer at per-layer ratio ``rho`` (formulas in the module docstring)."""
    scheme = _scheme(decomp, pattern)
    numel = m * n
    if scheme in ("mat-ab", "mat-aad"):
        r = max(1, math.ceil(rho * m * n / (m + n)))
        return LayerPlan(name, tuple(shape), m, n, decomp, pattern, r, 0, r * (m + n))
    if scheme == "mat-freeze":
        r = max(1, math.ceil(rho * m * n / n))
        return LayerPlan(name, tuple(shape), m, n, decomp, pattern, r, 0, r * n)
    if scheme in ("kron-ab", "kron-aad"):
        nb, z = bkd_blocks(numel, rho)
        return LayerPlan(name, tuple(shape), m, n, decomp, pattern, nb, z, 2 * nb * z * z)
    if scheme == "kron-freeze":
        nb, z = bkd_blocks(numel, 2 * rho)
        return LayerPlan(name, tuple(shape), m, n, decomp, pattern, nb, z, nb * z * z)
    r = max(1, math.ceil(rho * m * n / (2 * (m + n))))  # hadamard-ab (FedPara)
    return LayerPlan(name, tuple(shape), m, n, decomp, pattern, r, 0, 2 * r * (m + n))


@dataclass(frozen=True)
class ModelPlan:
    """Per-layer plan of a model plus its whole-model accounting (the paper's compression ratio, Section 5.1).

    ``p_dense``: trainable scalars of the plain model; ``p_payload``: scalars exchanged per
    direction per client (trainable factors + every parameter that is not a compressed weight);
    ``ratio = p_payload / p_dense``; ``rho_layer``: the per-layer ratio the search settled on.
    """

    decomp: str
    pattern: str
    target_ratio: float
    rho_layer: float
    layers: tuple[LayerPlan, ...]
    p_dense: int
    p_other: int

    @property
    def p_payload(self) -> int:
        return self.p_other + sum(lp.payload for lp in self.layers)

    @property
    def ratio(self) -> float:
        return self.p_payload / self.p_dense


def plan_at_rho(
    model: nn.Module,
    decomp: str,
    pattern: str,
    rho: float,
    *,
    target_ratio: float | None = None,
    layers: Iterable[tuple[str, nn.Module]] | None = None,
    skip_first: int = 1,
    skip_last: int = 1,
) -> ModelPlan:
    """Plan every compressed layer of ``model`` at the same per-layer ratio ``rho``."""
    _scheme(decomp, pattern)
    chosen = list(layers) if layers is not None else compressible_layers(model, skip_first, skip_last)
    plans = []
    compressed = 0
    for name, module in chosen:
        m, n = layer_view(name, module)
        plans.append(plan_layer(name, tuple(module.weight.shape), m, n, decomp, pattern, rho))
        compressed += module.weight.numel()
    p_dense = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return ModelPlan(decomp, pattern, float(target_ratio if target_ratio is not None else rho), rho,
                     tuple(plans), p_dense, p_dense - compressed)


def smallest_reachable_ratio(model: nn.Module, decomp: str, pattern: str, **kw) -> float:
    """Whole-model ratio with every compressed layer at rank 1 / a single Kronecker block."""
    return plan_at_rho(model, decomp, pattern, 1e-12, **kw).ratio


def plan_model(
    model: nn.Module,
    decomp: str = "kron",
    pattern: str = "aad",
    target_ratio: float = 1 / 32,
    *,
    skip_first: int = 1,
    skip_last: int = 1,
    include: Sequence[str] | None = None,
    strict: bool = True,
) -> ModelPlan:
    """Search the per-layer ratio that meets a whole-model ratio (reference code's force loop).

    Parameters
    ----------
    model : nn.Module
        Plain model (before wrapping).
    decomp : {"kron", "mat", "hadamard"} (default "kron")
    pattern : {"aad", "ab", "freeze"} (default "aad")
    target_ratio : float in (0, 1] (default 1/32)
        Whole-model ratio ``P_payload / P_dense`` to meet (within +0.001, as the code).
    strict : bool (default True)
        Raise :class:`UnreachableRatioError` (stating the smallest reachable ratio) when the loop
        bottoms out above ``target_ratio + 0.001``; ``False`` returns the bottomed-out plan like
        the reference code does (e.g. SVHN CNN-4 at 1/32 -> 0.0353).
    """
    target = validate_ratio(target_ratio)
    chosen = compressible_layers(model, skip_first, skip_last, include)
    rho = target
    plan = plan_at_rho(model, decomp, pattern, rho, target_ratio=target, layers=chosen)
    while plan.ratio - target > _FORCE_TOL:
        nxt = rho - _FORCE_STEP
        if nxt <= 0:
            break
        rho = nxt
        plan = plan_at_rho(model, decomp, pattern, rho, target_ratio=target, layers=chosen)
    if strict and plan.ratio - target > _FORCE_TOL:
        floor = plan_at_rho(model, decomp, pattern, 1e-12, layers=chosen)
        raise UnreachableRatioError(
            f"target_ratio={target:.6g} is unreachable for this model with decomp={decomp!r}, "
            f"pattern={pattern!r}: the smallest reachable ratio is {floor.ratio:.5f} "
            f"(dense layers alone: {floor.p_other / floor.p_dense:.5f}; every compressed layer at rank 1 / one block). "
            "Choose target_ratio >= that value, or plan with strict=False to accept the floor."
        )
    return plan
