"""FedMUD's round protocol, framework-neutral (spec 004, Sections 1.4-1.5 and 8).

:class:`MUDServer` and :class:`MUDClientCore` implement what crosses the wire; the Flower strategy
and client are thin adapters around them.

Downlink to a client in round ``t`` (arrays in this order):

1. the payload: the averaged trainable factors of round ``t-1`` (the initial factors in round 1)
   and every dense array (dense layers, BN parameters and statistics, biases);
2. only for a client that missed merges (partial participation): either the factor payloads of
   the merges it missed (``catch-up``), or the full ``W_base`` of the compressed layers when that is
   smaller. With full participation nothing is added.

Config (scalars): ``fedmud_seed`` (seed of the factors sent, so the frozen factors can be
regenerated), ``fedmud_push`` / ``fedmud_new_seed`` (merge + reset from this seed before training),
``fedmud_sync_from`` (merges the client is known to hold), ``fedmud_catchup_seeds`` (comma-separated
seeds of the missed merges), ``fedmud_full_base``, ``fedmud_base_seed``.

Uplink: the payload after local training. ``W_base`` is created from ``fedmud_base_seed`` on every
party (spec 4.3 init) and afterwards only changes by merges of averaged factors that every party
applies identically (same torch ops, so replicas stay bit-identical); frozen factors come from the
seeds. Neither is ever sent (except a "given" initial base, or a catch-up).
"""

from __future__ import annotations

import copy
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from .aggregation import aggregation_weights, weighted_mean
from .baselines import svd_factors
from .options import MUDOptions
from .schedule import is_push_round
from .seeds import factor_generator
from .sizing import ModelPlan, plan_model
from .wrap import DecomposedModel

__all__ = ["MUDServer", "MUDClientCore", "round_seed", "plain_float_keys", "init_base", "draw_base", "build_decomposed"]

_BASE_STREAM = 1000


def round_seed(seed: int, server_round: int) -> int:
    """Shared factor seed of round ``server_round`` (32-bit, derived from the experiment seed)."""
    return int(np.random.SeedSequence([int(seed), int(server_round), 7]).generate_state(1, np.uint32)[0] >> 1)


def plain_float_keys(model: nn.Module) -> list[str]:
    """State-dict keys of the floating-point entries (the order of the exchanged plain weights)."""
    return [k for k, v in model.state_dict().items() if v.is_floating_point()]


def draw_base(shape, layer_index: int, opts: MUDOptions, base_seed: int) -> torch.Tensor:
    """Seeded initial weight of compressed layer ``layer_index``: ``Normal(0, base_std)``
    ("normal", reference code) or ``Uniform(+-1/sqrt(fan_in))`` ("kaiming", PyTorch default)."""
    g = factor_generator(base_seed, layer_index, _BASE_STREAM)
    if opts.base_init == "kaiming":
        bound = 1.0 / np.sqrt(int(np.prod(shape[1:])))
        return (torch.rand(tuple(shape), generator=g) * 2 - 1) * bound
    return torch.randn(tuple(shape), generator=g) * opts.base_std


@torch.no_grad()
def init_base(dm: DecomposedModel, opts: MUDOptions, base_seed: int) -> None:
    """Initial ``W_base`` of the compressed layers: zero for zero-base methods, seeded for
    ``base_init`` "normal"/"kaiming", untouched for "given"."""
    for idx, (name, _) in enumerate(dm.decompositions()):
        base = dm.base(name)
        if opts.zero_base:
            base.zero_()
        elif opts.base_init != "given":
            base.copy_(draw_base(base.shape, idx, opts, base_seed).to(base))


def build_decomposed(model: nn.Module, opts: MUDOptions, *, seed: int = 0, plan: ModelPlan | None = None,
                     copy_model: bool = True) -> DecomposedModel:
    """Plan (force loop) and wrap ``model`` (a copy by default) according to ``opts``."""
    net = copy.deepcopy(model) if copy_model else model
    if plan is None:
        plan = plan_model(net, opts.decomp, opts.pattern, opts.target_ratio, skip_first=opts.skip_first,
                          skip_last=opts.skip_last, strict=opts.strict_ratio)
    return DecomposedModel(net, plan, seed=seed, init_scale=opts.scale, init_dist=opts.init_dist,
                           random_right=opts.random_right, zero_base=opts.zero_base)


def _factor_keys(dm: DecomposedModel) -> list[str]:
    return [k for k in dm.payload_keys() if ".parametrizations." in "." + k]


class MUDServer:
    """Server side of FedMUD (and of FedLMT / FedPara / FedHM with the matching options).

    Parameters
    ----------
    model : nn.Module
        A plain model of the experiment (copied).
    initial_parameters : list of np.ndarray, optional
        Initial plain weights (float state entries in state-dict order); used for the dense layers
        and, with ``base_init="given"`` or FedHM, for the compressed layers' initial weights.
    options : MUDOptions
    seed : int (>= 0)
        Experiment seed: round seeds and the base seed derive from it.
    """

    def __init__(self, model: nn.Module, initial_parameters: Sequence[np.ndarray] | None, options: MUDOptions,
                 seed: int = 0):
        self.opts = options
        self.seed = int(seed)
        plain = copy.deepcopy(model)
        self.state_keys = list(plain.state_dict().keys())
        if initial_parameters is not None:
            if len(initial_parameters) != len(self.state_keys):
                raise ValueError(f"initial_parameters has {len(initial_parameters)} arrays, the model has "
                                 f"{len(self.state_keys)} state entries")
            state = plain.state_dict()
            with torch.no_grad():
                for k, a in zip(self.state_keys, initial_parameters):
                    state[k].copy_(torch.as_tensor(np.asarray(a)).reshape(state[k].shape).to(state[k].dtype))
        self.base_seed = round_seed(self.seed, 0)
        self.factor_seed = round_seed(self.seed, 1)
        plan = plan_model(plain, options.decomp, options.pattern, options.target_ratio, skip_first=options.skip_first,
                          skip_last=options.skip_last, strict=options.strict_ratio)
        if options.fedhm:
            # the server keeps full weights; the factors come from their truncated SVD every round
            self.full = {}
            for idx, lp in enumerate(plan.layers):
                w = plain.get_submodule(lp.name).weight.detach()
                if options.base_init != "given":
                    w = draw_base(lp.shape, idx, options, self.base_seed)
                self.full[lp.name] = w.numpy().astype(np.float32).copy()
        self.dm = build_decomposed(plain, options, seed=self.factor_seed, plan=plan, copy_model=False)
        init_base(self.dm, options, self.base_seed)
        self.merge_log: list[tuple[int, list[np.ndarray]]] = []
        self.client_merges: dict[int, int] = {}
        self._round_cache: dict | None = None

    @property
    def plan(self) -> ModelPlan:
        return self.dm.plan

    # ------------------------------------------------------------------ downlink
    def begin_round(self, server_round: int) -> dict:
        """Prepare round ``server_round`` (push bookkeeping, FedHM factorisation); returns the
        common config entries."""
        opts = self.opts
        if opts.fedhm:
            self._factorise()
        payload = self.dm.get_payload()
        base_before = None if opts.zero_base else self.dm.base_arrays()
        merges_before = len(self.merge_log)
        push = opts.reset_interval is not None and is_push_round(server_round, opts.reset_interval)
        sent_seed = self.factor_seed
        cfg = {"fedmud_seed": int(sent_seed), "fedmud_push": bool(push), "fedmud_base_seed": int(self.base_seed)}
        if push:
            keys = _factor_keys(self.dm)
            state = self.dm.model.state_dict()
            self.merge_log.append((sent_seed, [state[k].detach().numpy().copy() for k in keys]))
            new_seed = round_seed(self.seed, server_round)
            self.dm.merge_and_reset(new_seed)
            self.factor_seed = new_seed
            cfg["fedmud_new_seed"] = int(new_seed)
        else:
            cfg["fedmud_new_seed"] = int(sent_seed)
        self._round_cache = {"payload": payload, "base": base_before, "merges_before": merges_before,
                             "push": push, "round": server_round}
        return cfg

    def instructions_for(self, partition_id: int) -> tuple[list[np.ndarray], dict]:
        """Arrays and per-client config for one sampled client (call after :meth:`begin_round`)."""
        rc = self._round_cache
        if rc is None:
            raise RuntimeError("begin_round must be called first")
        arrays = list(rc["payload"])
        cfg = {"fedmud_sync_from": 0, "fedmud_catchup_seeds": "", "fedmud_full_base": False}
        if not self.opts.zero_base:
            known = self.client_merges.get(partition_id)
            mb = rc["merges_before"]
            need_full = known is None and self.opts.base_init == "given"
            start = 0 if known is None else known
            missing = self.merge_log[start:mb]
            catchup_bytes = sum(a.nbytes for _, arrs in missing for a in arrs)
            base_bytes = sum(a.nbytes for a in rc["base"])
            if need_full or (missing and catchup_bytes >= base_bytes):
                arrays += rc["base"]
                cfg["fedmud_full_base"] = True
                cfg["fedmud_sync_from"] = mb
            else:
                cfg["fedmud_sync_from"] = start
                cfg["fedmud_catchup_seeds"] = ",".join(str(s) for s, _ in missing)
                for _, arrs in missing:
                    arrays += arrs
            self.client_merges[partition_id] = mb + (1 if rc["push"] else 0)
        return arrays, cfg

    # ------------------------------------------------------------------ uplink
    def aggregate(self, results: Sequence[tuple[Sequence[np.ndarray], int]]) -> None:
        """Direct aggregation: weighted element-wise mean of the clients' payloads (FedHM: mean
        of the recovered products for the compressed layers)."""
        weights = aggregation_weights([n for _, n in results], self.opts.weighting)
        payloads = [list(a) for a, _ in results]
        avg = weighted_mean(payloads, weights)
        if self.opts.fedhm:
            keys = self.dm.payload_keys()
            for name, deco in self.dm.decompositions():
                lk = [i for i, k in enumerate(keys) if k.startswith(name + ".parametrizations.")]
                acc = np.zeros(deco.plan.shape, dtype=np.float64)
                for w, arrs in zip(weights, payloads):
                    u, v = (np.asarray(arrs[i], dtype=np.float64) for i in lk)
                    acc += w * (u @ v).reshape(deco.plan.shape)
                self.full[name] = acc.astype(np.float32)
        self.dm.set_payload(avg)

    def _factorise(self) -> None:
        keys = self.dm.payload_keys()
        payload = self.dm.get_payload()
        for name, deco in self.dm.decompositions():
            lk = [i for i, k in enumerate(keys) if k.startswith(name + ".parametrizations.")]
            u, v = svd_factors(self.full[name].reshape(deco.plan.m, deco.plan.n), deco.plan.rank)
            payload[lk[0]], payload[lk[1]] = u, v
        self.dm.set_payload(payload)

    # ------------------------------------------------------------------ model views
    def global_weights(self) -> list[np.ndarray]:
        """Plain weights of the global model, every state entry in state-dict order
        (``W_base + dW(aggregated)``; FedHM: full W)."""
        eff = self.dm.effective_state_dict()
        out = []
        for k in self.state_keys:
            owner = k.rpartition(".")[0]
            if self.opts.fedhm and k.endswith(".weight") and owner in self.full:
                out.append(self.full[owner].copy())
            else:
                out.append(eff[k].numpy().copy())
        return out

    def payload_scalars(self) -> int:
        return sum(a.size for a in self.dm.get_payload())


class MUDClientCore:
    """Client side of the protocol: rebuild the round's model from what was received.

    Parameters
    ----------
    model : nn.Module
        Plain model of the experiment (copied; its weights are irrelevant).
    options : MUDOptions
    plan : ModelPlan, optional
        Skip the ratio search when the plan is known.
    """

    def __init__(self, model: nn.Module, options: MUDOptions, plan: ModelPlan | None = None):
        self.opts = options
        self.dm = build_decomposed(model, options, plan=plan)
        self.merges = 0

    def receive(self, arrays: Sequence[np.ndarray], config: dict,
                stored: tuple[list[np.ndarray], int] | None) -> tuple[list[np.ndarray], int] | None:
        """Apply sync, load the payload and push if asked. Returns the state to store
        (``(W_base arrays, merges)``; None for zero-base methods)."""
        dm, opts = self.dm, self.opts
        n_payload = len(dm.payload_keys())
        payload, extra = list(arrays[:n_payload]), list(arrays[n_payload:])
        if not opts.zero_base:
            if config.get("fedmud_full_base", False):
                n = len(dm.plan.layers)
                dm.set_base_arrays(extra[:n])
                extra = extra[n:]
                self.merges = int(config["fedmud_sync_from"])
            else:
                if stored is None:
                    init_base(dm, opts, int(config["fedmud_base_seed"]))
                    self.merges = 0
                else:
                    dm.set_base_arrays(stored[0])
                    self.merges = int(stored[1])
                if self.merges != int(config.get("fedmud_sync_from", 0)):
                    raise RuntimeError(
                        f"FedMUD client holds W_base after {self.merges} merges but the server assumed "
                        f"{config.get('fedmud_sync_from')}: the client state (context.state) was lost or is stale")
                seeds = [int(s) for s in str(config.get("fedmud_catchup_seeds", "")).split(",") if s]
                keys = _factor_keys(dm)
                for s in seeds:
                    dm.reset(s)
                    dm_set(dm, keys, extra[: len(keys)])
                    extra = extra[len(keys):]
                    dm.merge()
                    self.merges += 1
        if extra:
            raise ValueError(f"{len(extra)} unexpected extra arrays in the FedMUD downlink")
        dm.reset(int(config["fedmud_seed"]))  # regenerate the frozen factors of the received payload
        dm.set_payload(payload)
        if config.get("fedmud_push", False):
            dm.merge_and_reset(int(config["fedmud_new_seed"]))
            self.merges += 1
        if opts.zero_base:
            return None
        return dm.base_arrays(), self.merges

    def payload(self) -> list[np.ndarray]:
        return self.dm.get_payload()


@torch.no_grad()
def dm_set(dm: DecomposedModel, keys: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
    """Set state entries of the wrapped model by key."""
    state = dm.model.state_dict()
    for k, a in zip(keys, arrays):
        state[k].copy_(torch.as_tensor(np.asarray(a)).reshape(state[k].shape))
