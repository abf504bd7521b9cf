"""The MeZO zeroth-order step (two-point SPSA estimator with seed-regenerated directions).

Paper: Ling et al., "On the Convergence of Zeroth-Order Federated Tuning for Large Language
Models", KDD 2024, Eq. (3); MeZO: Malladi et al., NeurIPS 2023.

One step on a batch ``B`` with perturbation scale ``mu`` and learning rate ``lr``::

    theta += mu z;      L+ = F(theta; B)
    theta -= 2 mu z;    L- = F(theta; B)
    theta  = restored   (snapshot copy, bit-exact; or += mu z, up to rounding)
    g = (L+ - L-) / (2 mu)                       # projected gradient, a scalar
    theta -= lr * g * z                          # z regenerated from the step's seed

No autograd graph is built (everything runs under ``torch.no_grad()``), no optimizer state exists
and ``z`` is never stored: only its integer seed. A non-finite loss skips the step (parameters are
restored) and is counted in :attr:`MeZOEngine.n_skipped`.

The engine works on any list of named tensors (LoRA adapters of a peft model, all parameters of
a small network, or a plain tensor for a closed-form loss).

Two update rules (``variant``):

- ``"paper"``: the update above in place, ``theta <- (1 - lr*wd) theta - lr*g*z`` in one fused
  step per tensor; weight decay is skipped for tensors whose name, lower-cased, contains
  ``bias``, ``layer_norm`` or ``layernorm``; ``g`` is computed in double precision from the two
  losses.
- ``"code"``: the official FedMeZO code's arithmetic (FederatedScope, branch FedMeZO,
  ``llm/trainer/mezo_trainer.py``): ``g = ((L+ - L-) / (2 mu))`` on the loss tensors (in the
  model's dtype, so a half-precision model gives a half-precision ``g``), then
  ``theta <- theta - lr * (g*z + wd*theta)`` evaluated as written in the tensors' dtype, and
  weight decay is skipped only for tensor names that contain ``bias``, ``layer_norm`` or
  ``layernorm`` as written (case-sensitive: ``LayerNorm.weight`` is decayed). With
  ``z_device="param"`` and ``restore_mode="regenerate"`` the directions and the restore are the
  official code's too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ..core.validation import check_choice, check_integer, check_range
from .config import RESTORE_MODES, VARIANTS, Z_DEVICES
from .zseed import derive_seed, iter_z

_WD_EXCLUDE = ("bias", "layer_norm", "layernorm")


def decays(name: str, variant: str = "paper") -> bool:
    """Whether MeZO's weight decay applies to the tensor called ``name``: not when the name contains
    ``bias``, ``layer_norm`` or ``layernorm`` (``"paper"``: in any case; ``"code"``: as written, the
    official code's case-sensitive match)."""
    key = name if variant == "code" else name.lower()
    return not any(k in key for k in _WD_EXCLUDE)


def direction_seed(step_seed: int, j: int) -> int:
    """Seed of direction ``j`` of a step whose seed is ``step_seed`` (``j = 0`` is the step seed)."""
    return int(step_seed) if j == 0 else derive_seed(int(step_seed) % (2**63), 0, 0, 0, int(j))


def trainable_named_params(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Canonical order of the tensors MeZO perturbs: ``named_parameters()`` with ``requires_grad``."""
    out = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not out:
        raise ValueError("module has no trainable parameters (requires_grad=True); nothing to tune")
    return out


@dataclass
class StepResult:
    """Outcome of one MeZO step.

    ``pairs`` lists the ``(seed, coef)`` updates applied in order: ``theta <- theta - lr*coef*z(seed)``
    (``coef = g_j / n`` for direction ``j`` of ``n``); empty when the step was skipped.
    """

    loss_plus: float
    loss_minus: float
    projected_grads: list[float]
    pairs: list[tuple[int, float]] = field(default_factory=list)
    skipped: bool = False

    @property
    def g(self) -> float:
        """Mean projected gradient over the directions."""
        return float(sum(self.projected_grads) / max(1, len(self.projected_grads)))


class MeZOEngine:
    """Zeroth-order optimiser over a fixed, ordered set of tensors (the step of
    :class:`flwr_strategies.clients.fedmezo.MeZO`).

    ``params``: a module (its parameters with ``requires_grad=True``, e.g. only the LoRA adapters
    of a peft model) or ``(name, tensor)`` pairs, in canonical order. ``mu``, ``restore_mode``
    (``"regenerate"`` restores by adding ``+mu z`` again, MeZO's way, not bit-exact), ``z_device``,
    ``weight_decay`` (see :func:`decays`), ``num_perturbations`` and ``variant`` as ``MeZO``'s.
    ``module`` (default: ``params`` when it is a module) is put into ``eval()`` during a step
    (dropout off, as in the reference) and back afterwards.
    """

    def __init__(
        self,
        params: nn.Module | Sequence[tuple[str, torch.Tensor]],
        *,
        mu: float = 1e-3,
        restore_mode: str = "snapshot",
        z_device: str = "cpu",
        weight_decay: float = 0.0,
        num_perturbations: int = 1,
        module: nn.Module | None = None,
        variant: str = "paper",
    ) -> None:
        if isinstance(params, nn.Module):
            module = params if module is None else module
            named = trainable_named_params(params)
        else:
            named = [(str(n), t) for n, t in params]
            if not named:
                raise ValueError("MeZOEngine needs at least one tensor to tune")
        check_range("mu", mu, 0.0, low_open=True)
        check_choice("restore_mode", restore_mode, RESTORE_MODES)
        check_choice("z_device", z_device, Z_DEVICES)
        check_range("weight_decay", weight_decay, 0.0)
        check_integer("num_perturbations", num_perturbations, 1)
        check_choice("variant", variant, VARIANTS)
        self.names = [n for n, _ in named]
        self.tensors = [t for _, t in named]
        self.mu = float(mu)
        self.restore_mode = restore_mode
        self.z_device = z_device
        self.weight_decay = float(weight_decay)
        self.num_perturbations = int(num_perturbations)
        self.module = module
        self.variant = variant
        self.n_steps = 0
        self.n_skipped = 0

    # ------------------------------------------------------------------ primitives
    @torch.no_grad()
    def perturb(self, seed: int, scale: float) -> None:
        """``theta += scale * z(seed)`` in place, one tensor at a time.

        ``scale*z`` is rounded before the add (no fused multiply-add), so +mu, -2mu, +mu returns an
        exactly-zero tensor (LoRA B at init) to exactly zero in regenerate mode.
        """
        for p, z in zip(self.tensors, iter_z(self.tensors, seed, self.z_device)):
            p.add_(z.mul_(scale))

    @torch.no_grad()
    def apply_update(self, seed: int, lr: float, coef: float) -> None:
        """``theta <- theta - lr*(coef*z(seed) + wd*theta)`` (wd only where :func:`decays`)."""
        wd = self.weight_decay
        for name, p, z in zip(self.names, self.tensors, iter_z(self.tensors, seed, self.z_device)):
            if self.variant == "code":
                step = coef * z + wd * p if decays(name, "code") else coef * z
                p.copy_(p - lr * step)
                continue
            if wd > 0 and decays(name):
                p.mul_(1.0 - lr * wd)
            p.add_(z, alpha=-lr * coef)

    def snapshot(self) -> list[torch.Tensor]:
        """Detached clones of the tuned tensors."""
        with torch.no_grad():
            return [t.detach().clone() for t in self.tensors]

    @torch.no_grad()
    def load(self, values: Sequence[torch.Tensor]) -> None:
        """Copy ``values`` into the tuned tensors (exact)."""
        if len(values) != len(self.tensors):
            raise ValueError(f"expected {len(self.tensors)} tensors, got {len(values)}")
        for p, v in zip(self.tensors, values):
            if tuple(v.shape) != tuple(p.shape):
                raise ValueError(f"shape mismatch: {tuple(v.shape)} vs {tuple(p.shape)}")
            p.copy_(v)

    # ------------------------------------------------------------------ the step
    @staticmethod
    def _to_float(loss) -> float:
        return float(loss.item() if torch.is_tensor(loss) else loss)

    def step(
        self,
        loss_fn: Callable[[], torch.Tensor | float],
        lr: float,
        seed: int,
        *,
        projected_grad_override: float | None = None,
    ) -> StepResult:
        """One MeZO step.

        ``loss_fn()`` evaluates the loss on the step's batch at the current tensors (the same batch
        for both calls). ``seed`` is the step's integer seed; direction ``j`` of ``n`` uses
        ``derive_seed(seed, 0, 0, 0, j)`` for ``j >= 1`` and ``seed`` itself for ``j = 0``.
        ``projected_grad_override`` replaces ``g`` (testing hook: ``0.0`` leaves theta unchanged).
        """
        check_range("lr", lr, 0.0, low_open=True)
        was_training = self.module.training if self.module is not None else None
        if self.module is not None:
            self.module.eval()
        try:
            with torch.no_grad():
                return self._step(loss_fn, float(lr), int(seed), projected_grad_override)
        finally:
            if self.module is not None and was_training:
                self.module.train()

    def _step(self, loss_fn, lr: float, seed: int, override: float | None) -> StepResult:
        self.n_steps += 1
        snap = self.snapshot() if self.restore_mode == "snapshot" else None
        mu = self.mu
        grads: list[float] = []
        lp_sum = lm_sum = 0.0
        seeds = [direction_seed(seed, j) for j in range(self.num_perturbations)]
        for s in seeds:
            self.perturb(s, mu)
            lp_raw = loss_fn()
            self.perturb(s, -2.0 * mu)
            lm_raw = loss_fn()
            if snap is not None:
                self.load(snap)
            else:
                self.perturb(s, mu)
            lp, lm = self._to_float(lp_raw), self._to_float(lm_raw)
            if self.variant == "code" and torch.is_tensor(lp_raw) and torch.is_tensor(lm_raw):
                g = float(((lp_raw - lm_raw) / (2 * mu)).item())  # in the losses' dtype, as the official code
            else:
                g = (lp - lm) / (2.0 * mu)
            if not (math.isfinite(lp) and math.isfinite(lm) and math.isfinite(g)):  # skip the step
                self.n_skipped += 1
                return StepResult(lp, lm, grads, [], skipped=True)
            grads.append(g if override is None else float(override))
            lp_sum += lp
            lm_sum += lm
        n = len(seeds)
        pairs = [(s, g / n) for s, g in zip(seeds, grads)]
        for s, c in pairs:
            self.apply_update(s, lr, c)
        return StepResult(lp_sum / n, lm_sum / n, grads, pairs)
