"""FedMUD's round protocol, framework-neutral (FedMUD paper, Sections 3.1-3.3): shared helpers
and the client half (:class:`MUDClientCore`). The server half is
:class:`~flwr_strategies.fedmud.server.FedMUDServer`.

Downlink to a client in round ``t`` (arrays in this order):

1. the payload: the averaged trainable factors of round ``t-1`` (the initial factors in round 1)
   and every dense array (dense layers, BN parameters and statistics, biases);
2. only for a client whose ``W_base`` is behind (partial participation): either the factor payloads
   of the merges it missed (``catch-up``), or the full ``W_base`` of the compressed layers when that
   is smaller. With full participation nothing is added.

Config entries (scalars): ``fedmud`` (the :class:`FedMUDConfig` and the per-layer ratio as JSON, so
the client builds exactly the server's factor shapes), ``fedmud_seed`` (seed of the factors sent,
to regenerate the frozen ones), ``fedmud_push`` / ``fedmud_new_seed`` (merge + reset from this seed
before training), ``fedmud_base_seed`` (seed of the initial ``W_base``), ``fedmud_sync_from``
(merge index of the first catch-up entry, or of the full base), ``fedmud_merges`` (merges folded
into ``W_base`` before this round's push), ``fedmud_catchup_seeds`` (comma-separated seeds of the
catch-up entries), ``fedmud_full_base``.

Uplink: the payload after local training.

``W_base`` is created from ``fedmud_base_seed`` on every party and afterwards only changes by merges
of averaged factors that every party applies with the same torch operations, so the replicas stay
bit-identical. A client keeps ``(W_base, merges)`` between rounds (``context.state``); the server
keeps only one integer per client: the merge count the client is known to hold (from its last
valid reply). A client that holds more merges than that (its reply was lost after it applied a
push) skips the catch-up entries it already has, so a lost reply never desynchronises it.
"""

from __future__ import annotations

import copy
import logging
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .config import FedMUDConfig
from .seeds import factor_generator
from .sizing import ModelPlan, UnreachableRatioError, plan_at_rho, plan_model, smallest_reachable_ratio
from .wrap import DecomposedModel

__all__ = ["MUDClientCore", "round_seed", "init_base", "draw_base", "build_decomposed",
           "plan_for_config", "factor_keys", "WIRE_KEY", "FedMUDStateError"]

log = logging.getLogger(__name__)

_BASE_STREAM = 1000
WIRE_KEY = "fedmud"


class FedMUDStateError(RuntimeError):
    """A client's stored ``W_base`` cannot be brought to the server's (its state was lost or is stale)."""


def round_seed(seed: int, server_round: int) -> int:
    """Shared factor seed of round ``server_round`` (31-bit, derived from the experiment seed)."""
    return int(np.random.SeedSequence([int(seed), int(server_round), 7]).generate_state(1, np.uint32)[0] >> 1)


def draw_base(shape, layer_index: int, config: FedMUDConfig, base_seed: int) -> torch.Tensor:
    """Seeded initial weight of compressed layer ``layer_index``: ``Normal(0, base_std)``
    ("normal", reference code) or ``Uniform(+-1/sqrt(fan_in))`` ("kaiming", PyTorch's default)."""
    g = factor_generator(base_seed, layer_index, _BASE_STREAM)
    if config.base_init == "kaiming":
        bound = 1.0 / np.sqrt(int(np.prod(shape[1:])))
        return (torch.rand(tuple(shape), generator=g) * 2 - 1) * bound
    return torch.randn(tuple(shape), generator=g) * config.base_std


@torch.no_grad()
def init_base(dm: DecomposedModel, config: FedMUDConfig, base_seed: int) -> None:
    """Initial ``W_base`` of the compressed layers: zero for zero-base methods, seeded for
    ``base_init`` "normal"/"kaiming", untouched for "given"."""
    for idx, (name, _) in enumerate(dm.decompositions()):
        base = dm.base(name)
        if config.zero_base:
            base.zero_()
        elif config.base_init != "given":
            base.copy_(draw_base(base.shape, idx, config, base_seed).to(base))


def plan_for_config(model: nn.Module, config: FedMUDConfig) -> ModelPlan:
    """The factor sizes of ``model`` under ``config``: ``target_ratio`` met by the reference code's
    search; ``fallback_ratio`` when the target is unreachable (a warning is logged); else an error
    naming the settings (``strict_ratio=True``) or the floor (``strict_ratio=False``)."""
    kw = {"skip_first": config.skip_first, "skip_last": config.skip_last}
    try:
        return plan_model(model, config.decomp, config.pattern, config.target_ratio, strict=True, **kw)
    except UnreachableRatioError:
        floor = smallest_reachable_ratio(model, config.decomp, config.pattern, **kw)
    if config.fallback_ratio is not None:
        if config.fallback_ratio - floor < -1e-3:
            raise UnreachableRatioError(
                f"target_ratio={config.target_ratio:.6g} and fallback_ratio={config.fallback_ratio:.6g} are both "
                f"unreachable for this model with decomp={config.decomp!r}, pattern={config.pattern!r}: the smallest "
                f"reachable whole-model ratio is {floor:.5f}. Set target_ratio or fallback_ratio >= {floor:.5f}.")
        log.warning("FedMUD: target_ratio=%.6g is unreachable for this model (smallest reachable ratio %.5f); "
                    "using fallback_ratio=%.6g", config.target_ratio, floor, config.fallback_ratio)
        return plan_model(model, config.decomp, config.pattern, config.fallback_ratio, strict=True, **kw)
    if config.strict_ratio:
        raise UnreachableRatioError(
            f"target_ratio={config.target_ratio:.6g} is unreachable for this model with decomp={config.decomp!r}, "
            f"pattern={config.pattern!r}: the smallest reachable whole-model ratio is {floor:.5f} (the uncompressed "
            f"layers alone, every compressed layer at rank 1 / one block). Set target_ratio >= {floor:.5f}, "
            "fallback_ratio=<a reachable ratio>, or strict_ratio=False to accept the floor as the reference code does.")
    return plan_model(model, config.decomp, config.pattern, config.target_ratio, strict=False, **kw)


def build_decomposed(model: nn.Module, config: FedMUDConfig, *, seed: int = 0, plan: ModelPlan | None = None,
                     copy_model: bool = True) -> DecomposedModel:
    """Plan (unless ``plan`` is given) and wrap ``model`` (a copy by default) according to ``config``."""
    net = copy.deepcopy(model) if copy_model else model
    if plan is None:
        plan = plan_for_config(net, config)
    return DecomposedModel(net, plan, seed=seed, init_scale=config.scale, init_dist=config.init_dist,
                           random_right=config.random_right, zero_base=config.zero_base)


def factor_keys(dm: DecomposedModel) -> list[str]:
    """Payload keys of the trainable factors (what a merge folds into ``W_base``)."""
    return [k for k in dm.payload_keys() if ".parametrizations." in "." + k]


@torch.no_grad()
def dm_set(dm: DecomposedModel, keys: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
    """Set state entries of the wrapped model by key."""
    state = dm.model.state_dict()
    for k, a in zip(keys, arrays):
        state[k].copy_(torch.as_tensor(np.asarray(a)).reshape(state[k].shape))


_PLAN_CACHE: dict[tuple, ModelPlan] = {}


def plan_from_wire(model: nn.Module, config: FedMUDConfig, rho_layer: float) -> ModelPlan:
    """The server's plan rebuilt from its per-layer ratio (no search; cached per model structure)."""
    key = (config, float(rho_layer), tuple((k, tuple(v.shape)) for k, v in model.state_dict().items()))
    if key not in _PLAN_CACHE:
        if len(_PLAN_CACHE) > 64:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = plan_at_rho(model, config.decomp, config.pattern, float(rho_layer),
                                       skip_first=config.skip_first, skip_last=config.skip_last)
    return _PLAN_CACHE[key]


def _seeds(text) -> list[int]:
    return [int(s) for s in str(text or "").split(",") if s.strip()]


class MUDClientCore:
    """Client side of the protocol: turn one training message into the round's decomposed model.

    Parameters
    ----------
    model : nn.Module
        The plain model (the user's own). Wrapped in place with ``copy_model=False`` (its weights
        are irrelevant: they are overwritten from the message and the stored ``W_base``).
    config : FedMUDConfig
        The server's settings (from the message: :meth:`from_message_config`).
    plan : ModelPlan, optional
        The factor sizes (default: searched from ``config``).
    copy_model : bool (default True)
        Wrap a copy of ``model`` instead of ``model`` itself.
    """

    def __init__(self, model: nn.Module, config: FedMUDConfig, plan: ModelPlan | None = None, *,
                 copy_model: bool = True):
        self.config = config
        self.dm = build_decomposed(model, config, plan=plan, copy_model=copy_model)
        self.merges = 0

    @classmethod
    def from_message_config(cls, model: nn.Module, config: dict, *, copy_model: bool = True) -> "MUDClientCore":
        """Build from a training message's config (its ``fedmud`` entry carries the server's settings)."""
        if WIRE_KEY not in config:
            raise ValueError(f"the training config has no '{WIRE_KEY}' entry: this message does not come from a "
                             "FedMUD strategy (FedMUD, FedLMT, FedPara or FedHM)")
        cfg, extra = FedMUDConfig.from_wire(config[WIRE_KEY])
        plan = plan_from_wire(model, cfg, extra["rho_layer"]) if "rho_layer" in extra else None
        return cls(model, cfg, plan, copy_model=copy_model)

    def _check_payload(self, payload: Sequence[np.ndarray]) -> None:
        state = self.dm.model.state_dict()
        for k, a in zip(self.dm.payload_keys(), payload):
            if tuple(np.shape(a)) != tuple(state[k].shape):
                raise ValueError(f"received array for {k!r} has shape {tuple(np.shape(a))}, this model expects "
                                 f"{tuple(state[k].shape)}: the client's model differs from the server's")

    def receive(self, arrays: Sequence[np.ndarray], config: dict,
                stored: tuple[list[np.ndarray], int] | None) -> tuple[list[np.ndarray], int] | None:
        """Apply the sync, load the payload and push if asked.

        ``stored`` is what the previous call returned for this client (``(W_base arrays, merges)``),
        or None on its first round. Returns the new value to store (None for zero-base methods).
        Raises :class:`FedMUDStateError` when the stored base is behind what the server assumed.
        """
        dm, cfg = self.dm, self.config
        n_payload = len(dm.payload_keys())
        if len(arrays) < n_payload:
            raise ValueError(f"received {len(arrays)} arrays, the FedMUD payload of this model has {n_payload}")
        payload, extra = list(arrays[:n_payload]), list(arrays[n_payload:])
        self._check_payload(payload)
        if not cfg.zero_base:
            target = int(config.get("fedmud_merges", 0))
            start = int(config.get("fedmud_sync_from", 0))
            if bool(config.get("fedmud_full_base", False)):
                n = len(dm.plan.layers)
                if len(extra) < n:
                    raise ValueError(f"full-base sync needs {n} arrays, got {len(extra)}")
                dm.set_base_arrays(extra[:n])
                extra = extra[n:]
                self.merges = target
            else:
                if stored is None:
                    if start > 0:
                        raise FedMUDStateError(
                            f"this client holds no W_base (context.state is empty) but the server sends merges from "
                            f"#{start} on: the client state was lost")
                    init_base(dm, cfg, int(config["fedmud_base_seed"]))
                    self.merges = 0
                else:
                    dm.set_base_arrays(stored[0])
                    self.merges = int(stored[1])
                if self.merges < start:
                    raise FedMUDStateError(
                        f"this client's W_base holds {self.merges} merges but the server's catch-up starts at #{start}: "
                        "the client state (context.state) is stale")
                keys = factor_keys(dm)
                for j, s in enumerate(_seeds(config.get("fedmud_catchup_seeds", ""))):
                    entry, extra = extra[: len(keys)], extra[len(keys):]
                    if len(entry) != len(keys):
                        raise ValueError(f"catch-up entry {j} has {len(entry)} arrays, expected {len(keys)}")
                    if start + j < self.merges:
                        continue  # already applied (an earlier reply of this client was lost)
                    dm.reset(s)
                    dm_set(dm, keys, entry)
                    dm.merge()
                    self.merges += 1
                if self.merges != target:
                    raise FedMUDStateError(f"this client's W_base holds {self.merges} merges after the sync, the server "
                                           f"expects {target}")
        if extra:
            raise ValueError(f"{len(extra)} unexpected extra arrays in the FedMUD downlink")
        dm.reset(int(config["fedmud_seed"]))  # regenerate the frozen factors of the received payload
        dm.set_payload(payload)
        if bool(config.get("fedmud_push", False)):
            dm.merge_and_reset(int(config["fedmud_new_seed"]))
            self.merges += 1
        if cfg.zero_base:
            return None
        return dm.base_arrays(), self.merges

    def payload(self) -> list[np.ndarray]:
        """The arrays to send back: trainable factors and dense arrays, in the server's order."""
        return self.dm.get_payload()
