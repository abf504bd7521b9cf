"""Parametrisations ``W -> W + dW(theta)`` of FedMUD and its low-rank baselines.

Li et al., "The Panaceas for Improving Low-Rank Decomposition in Communication-Efficient Federated
Learning", ICML 2025, Sections 3-4 (Eqs. 3, 8-9). Registered with
``torch.nn.utils.parametrize`` on a layer's ``weight``: the parametrisation's input (the
``original`` tensor) is the frozen base ``W_base`` and the layer's forward uses
``W_base + reshape_rowmajor(dW, weight.shape)``.

Update structures (``L`` = left factor U / A, ``R`` = right factor V / B, ``prod`` = ``L @ R`` for
``mat`` and ``crop(stack_b(L_b (x) R_b))`` for ``kron``):

* ``ab``     (FedMUD, FedMUD+BKD): ``dW = prod(L, R)``; L random, R zero; both trainable.
* ``freeze`` (+F):                ``dW = prod(L~, R)``; L~ frozen random, R trainable zero.
* ``aad``    (+AAD):              ``dW = prod(L~, R) + prod(L, R~)``; L~, R~ frozen random
  (different streams), R and L trainable zero. Linear in the trainable factors, so averaging
  them averages the updates exactly.
* ``hadamard`` (FedPara baseline): ``dW = (X1 @ Y1) * (X2 @ Y2)``, all four random, trainable.

**Scale of the random factors.** The paper draws them from ``Uniform(-a, a)`` with one ``a`` tuned
per method together with the learning rate (a = 5 and lr 0.01 for BKD+AAD, Section 5.1). That ``a``
also sets how far one optimizer step on the factors moves the weight: in expectation over the
random factors, one SGD step of rate ``eta`` on the trainable factors changes ``W`` by
``-eta * g * G`` with the gain ``g = E[U U^T]`` per term: ``a^2/3`` per Kronecker term, ``r a^2/3``
per matrix term (``2a^2/3`` and ``2 r a^2/3`` for AAD). At ``a = 5`` BKD+AAD multiplies the step of
the user's optimizer by about 17 (x 10 with momentum 0.9), and the FedLMT / FedPara products start
an order of magnitude above a layer's usual initial weights. ``init_scale="auto"`` (see
:func:`auto_variances`) picks each factor's variance from the layer's shape instead, so that a
learning rate tuned for the plain model keeps its meaning.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .kron import bkd_delta
from .seeds import INIT_DISTS, draw_factor, factor_generator
from .sizing import LayerPlan

__all__ = ["UpdateDecomposition", "auto_variances", "AUTO"]

#: ``init_scale`` value that sizes the random factors per layer (:func:`auto_variances`).
AUTO = "auto"


def auto_variances(plan: LayerPlan, random_right: bool = False) -> tuple[float, float]:
    """Per-entry variances ``(v_left, v_right)`` of the random factors under ``init_scale="auto"``.

    - The factors form the weight itself (both random: FedLMT's ``random_right``, FedPara's Hadamard
      form): the product starts with PyTorch's default initial variance of the layer,
      ``Var(W) = 1 / (3 fan_in)`` (``Uniform(+-1/sqrt(fan_in))``), split between the two factors so
      that one SGD step moves ``W`` equally through each (``m v_left = n v_right`` for matrices).
    - The factors form an update that starts at 0 (FedMUD's patterns ``ab``, ``freeze``, ``aad``):
      one SGD step of rate ``eta`` on the trainable factors changes ``W`` by ``-eta G`` in
      expectation over the random factors, as a plain SGD step does (unit gain: ``r v = 1`` per matrix
      term, ``v = 1`` per Kronecker term; each of AAD's two terms takes half).
    """
    fan_in = max(1, math.prod(plan.shape[1:]))
    c = 1.0 / (3.0 * fan_in)
    r, m, n = plan.rank, plan.m, plan.n
    if plan.decomp == "hadamard":  # Var((X1 Y1) * (X2 Y2)) = (r v_x v_y)^2
        root = math.sqrt(c)
        return math.sqrt(root * n / (r * m)), math.sqrt(root * m / (r * n))
    if random_right:  # W = L R, both random
        if plan.decomp == "kron":  # W entry = A[.] B[.]
            return math.sqrt(c), math.sqrt(c)
        return math.sqrt(c * n / (r * m)), math.sqrt(c * m / (r * n))
    terms = 2.0 if plan.pattern == "aad" else 1.0
    v = 1.0 / terms if plan.decomp == "kron" else 1.0 / (terms * r)
    return v, v


class UpdateDecomposition(nn.Module):
    """Parametrisation of one layer's weight as ``W_base + dW(theta)``.

    Parameters
    ----------
    plan : LayerPlan
        Factor sizes of the layer (from :func:`~flwr_strategies.fedmud.sizing.plan_model`).
    layer_index : int
        Position of the layer among the compressed layers; part of every factor seed.
    init_scale : float (> 0) or "auto"
        ``a`` of ``Uniform(-a, a)`` (or std of ``Normal(0, a)``) for the random factors, or
        ``"auto"``: per-factor variances from :func:`auto_variances` (same distribution family).
    init_dist : {"uniform", "normal"} (default "uniform")
    random_right : bool (default False)
        Pattern ``ab`` only: also draw the right factor at random (FedLMT / FedHM init) instead of 0.
    """

    def __init__(self, plan: LayerPlan, layer_index: int, init_scale: float | str, init_dist: str = "uniform",
                 random_right: bool = False):
        super().__init__()
        if init_scale != AUTO and (isinstance(init_scale, (str, bool)) or not init_scale > 0):
            raise ValueError(f"init_scale must be > 0 or {AUTO!r}, got {init_scale!r}")
        if init_dist not in INIT_DISTS:
            raise ValueError(f"init_dist must be one of {INIT_DISTS}, got {init_dist!r}")
        if random_right and plan.pattern != "ab":
            raise ValueError(f"random_right is only meaningful for pattern 'ab', got {plan.pattern!r}")
        self.plan = plan
        self.layer_index = int(layer_index)
        self.init_scale = init_scale if init_scale == AUTO else float(init_scale)
        self.init_dist = init_dist
        self.random_right = bool(random_right)
        if init_scale == AUTO:  # Uniform(-a, a) has variance a^2/3; Normal(0, a) has a^2
            spread = 3.0 if init_dist == "uniform" else 1.0
            self._scales = tuple(math.sqrt(spread * v) for v in auto_variances(plan, random_right))
        else:
            self._scales = (self.init_scale, self.init_scale)
        lshape, rshape = plan.factor_shapes()
        z = lambda s: torch.zeros(s, dtype=torch.float32)  # noqa: E731
        if plan.decomp == "hadamard":
            for name, shape in (("x1", lshape), ("y1", rshape), ("x2", lshape), ("y2", rshape)):
                self.register_parameter(name, nn.Parameter(z(shape)))
        elif plan.pattern == "ab":
            self.left = nn.Parameter(z(lshape))
            self.right = nn.Parameter(z(rshape))
        elif plan.pattern == "freeze":
            self.register_buffer("left_frozen", z(lshape))
            self.right = nn.Parameter(z(rshape))
        else:  # aad
            self.register_buffer("left_frozen", z(lshape))
            self.register_buffer("right_frozen", z(rshape))
            self.right = nn.Parameter(z(rshape))
            self.left = nn.Parameter(z(lshape))

    # ------------------------------------------------------------------ factors
    def _prod(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        if self.plan.decomp == "kron":
            return bkd_delta(left, right, self.plan.m, self.plan.n)
        return left @ right

    def delta_matrix(self) -> torch.Tensor:
        """``dW`` in its ``m x n`` view."""
        p = self.plan
        if p.decomp == "hadamard":
            return (self.x1 @ self.y1) * (self.x2 @ self.y2)
        if p.pattern == "ab":
            return self._prod(self.left, self.right)
        if p.pattern == "freeze":
            return self._prod(self.left_frozen, self.right)
        return self._prod(self.left_frozen, self.right) + self._prod(self.left, self.right_frozen)

    def delta(self) -> torch.Tensor:
        """``dW`` reshaped row-major to the layer's weight shape."""
        return self.delta_matrix().reshape(self.plan.shape)

    def forward(self, base: torch.Tensor) -> torch.Tensor:
        return base + self.delta().to(base.dtype)

    # ------------------------------------------------------------------ reset
    def _draw(self, seed: int, factor_id: int, shape) -> torch.Tensor:
        scale = self._scales[factor_id % 2]  # even ids are left factors (U, A, X1, X2), odd ids right ones
        return draw_factor(shape, scale, self.init_dist, factor_generator(seed, self.layer_index, factor_id))

    @torch.no_grad()
    def reset(self, seed: int) -> None:
        """Re-initialise the factors from the shared round ``seed`` (in place, keeps Parameter identity).

        ``ab``: L random, R = 0 (R random with ``random_right``); ``freeze``: L~ random, R = 0;
        ``aad``: L~, R~ random (different streams), L = R = 0; ``hadamard``: all four random.
        Except for ``random_right``/``hadamard``, ``dW == 0`` exactly afterwards.
        """
        lshape, rshape = self.plan.factor_shapes()
        if self.plan.decomp == "hadamard":
            for fid, (name, shape) in enumerate((("x1", lshape), ("y1", rshape), ("x2", lshape), ("y2", rshape))):
                t = getattr(self, name)
                t.copy_(self._draw(seed, fid, shape).to(t.device))
            return
        if self.plan.pattern == "ab":
            self.left.copy_(self._draw(seed, 0, lshape).to(self.left.device))
            if self.random_right:
                self.right.copy_(self._draw(seed, 1, rshape).to(self.right.device))
            else:
                self.right.zero_()
        elif self.plan.pattern == "freeze":
            self.left_frozen.copy_(self._draw(seed, 0, lshape).to(self.left_frozen.device))
            self.right.zero_()
        else:
            self.left_frozen.copy_(self._draw(seed, 0, lshape).to(self.left_frozen.device))
            self.right_frozen.copy_(self._draw(seed, 1, rshape).to(self.right_frozen.device))
            self.right.zero_()
            self.left.zero_()

    def extra_repr(self) -> str:
        p = self.plan
        size = f"nb={p.rank}, z={p.side}" if p.decomp == "kron" else f"r={p.rank}"
        return f"{p.decomp}/{p.pattern}, m={p.m}, n={p.n}, {size}, payload={p.payload}"
