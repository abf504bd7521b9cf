"""Wrap a model's linear/conv layers with FedMUD's update decomposition.

Li et al., ICML 2025 (Sections 3.1-4). :class:`DecomposedModel` registers an
:class:`~flwr_strategies.fedmud.delta.UpdateDecomposition` on the ``weight`` of every planned layer
(``torch.nn.utils.parametrize``), freezes the base weights and provides the operations of the round
protocol: ``reset`` (redraw factors from a shared seed, ``dW = 0``), ``merge`` (fold ``dW`` into
``W_base``), and the wire schema (``payload_keys`` = trainable factors + every dense parameter +
float buffers such as BN running statistics; ``base`` = the replicated ``W_base`` that never has to
be sent once both sides hold it).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from .config import DEFAULT_INIT_SCALE
from .delta import AUTO, UpdateDecomposition
from .sizing import ModelPlan

__all__ = ["DecomposedModel"]

_PMARK = ".parametrizations."


class DecomposedModel:
    """A model whose planned layers compute ``W_base + dW(theta)`` (wrapped in place).

    Parameters
    ----------
    model : nn.Module
        Plain model; wrapped in place (pass a copy to keep the original). Its current weights of
        the planned layers become ``W_base``.
    plan : ModelPlan
        Output of :func:`~flwr_strategies.fedmud.sizing.plan_model`.
    seed : int (>= 0, default 0)
        Shared seed of the initial factors (round-1 reset).
    init_scale : float or "auto", optional
        ``a`` of ``Uniform(-a, a)``; default: the strategy's, :data:`~flwr_strategies.fedmud.config.DEFAULT_INIT_SCALE`
        for the plan's ``decomp`` (5.0 kron, 1.0 otherwise); ``"auto"`` sizes every factor from its layer
        (:func:`~flwr_strategies.fedmud.delta.auto_variances`).
    init_dist : {"uniform", "normal"} (default "uniform")
    random_right : bool (default False)
        Draw the right factor at random too (FedLMT/FedHM init).
    zero_base : bool (default False)
        Set ``W_base = 0`` (pre-decomposed weights: FedLMT, FedPara, FedHM).
    """

    def __init__(self, model: nn.Module, plan: ModelPlan, *, seed: int = 0, init_scale: float | str | None = None,
                 init_dist: str = "uniform", random_right: bool = False, zero_base: bool = False):
        self.model = model
        self.plan = plan
        scale = init_scale if init_scale is not None else DEFAULT_INIT_SCALE[plan.decomp]
        self.init_scale = scale if scale == AUTO else float(scale)
        self.plain_keys = list(model.state_dict().keys())
        self._names = [lp.name for lp in plan.layers]
        self._orders: dict[str, list[str]] = {}
        for idx, lp in enumerate(plan.layers):
            module = model.get_submodule(lp.name)
            if parametrize.is_parametrized(module, "weight"):
                raise ValueError(f"layer {lp.name!r} is already parametrized")
            self._orders[lp.name] = list(module._parameters)
            if tuple(module.weight.shape) != lp.shape:
                raise ValueError(f"layer {lp.name!r} has weight shape {tuple(module.weight.shape)}, plan says {lp.shape}")
            deco = UpdateDecomposition(lp, idx, self.init_scale, init_dist, random_right)
            deco.to(module.weight.device)
            parametrize.register_parametrization(module, "weight", deco)
            original = module.parametrizations.weight.original
            original.requires_grad_(False)
            if zero_base:
                with torch.no_grad():
                    original.zero_()
        self.reset(seed)

    # ------------------------------------------------------------------ access
    def decompositions(self) -> list[tuple[str, UpdateDecomposition]]:
        return [(n, self.model.get_submodule(n).parametrizations.weight[0]) for n in self._names]

    def base(self, name: str) -> torch.Tensor:
        """The frozen ``W_base`` tensor of compressed layer ``name``."""
        return self.model.get_submodule(name).parametrizations.weight.original

    def base_arrays(self) -> list[np.ndarray]:
        return [self.base(n).detach().cpu().numpy().copy() for n in self._names]

    @torch.no_grad()
    def set_base_arrays(self, arrays) -> None:
        if len(arrays) != len(self._names):
            raise ValueError(f"expected {len(self._names)} base arrays, got {len(arrays)}")
        for n, a in zip(self._names, arrays):
            b = self.base(n)
            b.copy_(torch.as_tensor(np.asarray(a), dtype=b.dtype).reshape(b.shape))

    # ------------------------------------------------------------------ protocol
    @torch.no_grad()
    def reset(self, seed: int) -> None:
        """Redraw every layer's factors from the shared ``seed`` (``dW = 0`` for FedMUD patterns)."""
        for _, deco in self.decompositions():
            deco.reset(int(seed))

    @torch.no_grad()
    def merge(self) -> None:
        """``W_base <- W_base + dW(theta)`` for every compressed layer (factors untouched)."""
        for name, deco in self.decompositions():
            base = self.base(name)
            base.add_(deco.delta().to(base.dtype))

    def merge_and_reset(self, seed: int) -> None:
        """The push step: fold the update into ``W_base`` and restart from ``seed``; the effective
        weights are unchanged."""
        self.merge()
        self.reset(seed)

    @torch.no_grad()
    def unwrap(self) -> nn.Module:
        """Remove the parametrisations, leaving each layer's plain ``weight = W_base + dW`` (trainable
        again, in its original parameter order, so ``state_dict()`` keys and order are the plain
        model's). Returns the model; this object must not be used afterwards."""
        for name in self._names:
            module = self.model.get_submodule(name)
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
            module.weight.requires_grad_(True)
            order = self._orders[name] + [k for k in module._parameters if k not in self._orders[name]]
            module._parameters = OrderedDict((k, module._parameters[k]) for k in order)
        self._names = []
        return self.model

    # ------------------------------------------------------------------ views
    @torch.no_grad()
    def effective_state_dict(self) -> "OrderedDict[str, torch.Tensor]":
        """The plain model's state dict (original key order) with ``W_eff = W_base + dW``."""
        wrapped = self.model.state_dict()
        out: OrderedDict[str, torch.Tensor] = OrderedDict()
        names = set(self._names)
        for key in self.plain_keys:
            owner, _, leaf = key.rpartition(".")
            if leaf == "weight" and owner in names:
                out[key] = self.model.get_submodule(owner).weight.detach().clone()
            else:
                out[key] = wrapped[key].detach().clone()
        return out

    def payload_keys(self) -> list[str]:
        """Keys of the wrapped state dict exchanged every round: trainable parameters (factors and
        dense parameters) and float buffers outside the parametrisations (e.g. BN statistics)."""
        params = dict(self.model.named_parameters())
        keys = []
        for key, value in self.model.state_dict().items():
            if key in params:
                if params[key].requires_grad:
                    keys.append(key)
            elif _PMARK not in "." + key and value.is_floating_point():
                keys.append(key)
        return keys

    def get_payload(self) -> list[np.ndarray]:
        state = self.model.state_dict()
        return [state[k].detach().cpu().numpy().copy() for k in self.payload_keys()]

    @torch.no_grad()
    def set_payload(self, arrays) -> None:
        keys = self.payload_keys()
        if len(arrays) != len(keys):
            raise ValueError(f"payload has {len(arrays)} arrays, schema expects {len(keys)}")
        state = self.model.state_dict()
        for k, a in zip(keys, arrays):
            t = state[k]
            a = np.asarray(a)
            if tuple(a.shape) != tuple(t.shape):
                raise ValueError(f"payload entry {k!r} has shape {a.shape}, expected {tuple(t.shape)}")
            t.copy_(torch.as_tensor(a, dtype=t.dtype))
