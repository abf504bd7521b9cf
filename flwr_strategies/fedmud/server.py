"""Server core of FedMUD (six variants) and of FedLMT / FedPara / FedHM (framework-neutral).

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025. The wire protocol is described in
:mod:`flwr_strategies.fedmud.protocol`.

State kept by the server (all of it in :meth:`FedMUDServer.state_dict`):

- the decomposed global model: ``W_base`` of the compressed layers, the averaged trainable factors,
  the dense arrays, and the seed of the current factors (frozen factors are regenerated from it);
- the merge count and a *bounded* log of the last merges' factor payloads, used to bring a client
  that missed merges up to date. The log never holds more entries than fit in the size of
  ``W_base`` itself: a client further behind receives the full ``W_base`` instead;
- per client, **one integer**: the merges its ``W_base`` is known to hold (from its last valid
  reply). Nothing else per client lives on the server: each client keeps its own ``W_base`` in
  ``context.state``. With 10,000 clients this is 10,000 integers;
- FedHM only: the full weights of the compressed layers.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ..core.aggregation import weighted_mean_metrics
from ..core.messages import ArraySpec, Instruction, Reply, ReplySpec
from ..core.server import ServerCore
from ..core.validation import ReplyError, require_finite
from .aggregation import aggregation_weights, weighted_mean
from .baselines import svd_factors
from .config import FedMUDConfig
from .protocol import WIRE_KEY, build_decomposed, draw_base, factor_keys, init_base, plan_for_config, round_seed
from .schedule import is_push_round

log = logging.getLogger(__name__)

__all__ = ["FedMUDServer"]


def _load_plain(model: nn.Module, arrays: Sequence[np.ndarray]) -> nn.Module:
    plain = copy.deepcopy(model).cpu()
    state = plain.state_dict()
    keys = list(state)
    if len(arrays) != len(keys):
        raise ValueError(f"initial_arrays has {len(arrays)} arrays but the model has {len(keys)} state_dict entries "
                         "(pass every entry of model.state_dict(), in order)")
    with torch.no_grad():
        for k, a in zip(keys, arrays):
            a = np.asarray(a)
            if tuple(a.shape) != tuple(state[k].shape):
                raise ValueError(f"initial_arrays entry {k!r} has shape {a.shape}, the model's is {tuple(state[k].shape)}")
            state[k].copy_(torch.as_tensor(a).to(state[k].dtype))
    return plain


class FedMUDServer(ServerCore):
    """FedMUD's server: sends the averaged factors, merges and resets on schedule, averages replies.

    Parameters
    ----------
    initial_arrays : list[np.ndarray]
        The initial global model, every ``state_dict`` entry of ``model`` in order. Dense layers start
        from it; the compressed layers' ``W_base`` is regenerated from the seed (``base_init``
        "normal"/"kaiming") or taken from it ("given", and FedHM's full weights).
    model : torch.nn.Module
        The plain model (structure only; copied). Its linear/conv layers except the first and the
        last are decomposed.
    config : FedMUDConfig (default FedMUD+BKD+AAD at 1/32, s = 1)
        Variant and hyperparameters.
    **kwargs
        :class:`~flwr_strategies.core.server.ServerCore` arguments (num_partitions,
        fraction_train, min_train, seed, on_train_config).
    """

    external_model_note = ("its clients train low-rank factors of base weights the server regenerates, and the model "
                           "it reports is rebuilt from them (W_base + dW), so a changed model cannot be turned back "
                           "into the factors the clients receive")

    def __init__(self, initial_arrays: Sequence[np.ndarray], *, model: nn.Module, config: FedMUDConfig | None = None,
                 **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (the plain model), got {type(model).__name__}")
        self.config = config if config is not None else FedMUDConfig()
        if not isinstance(self.config, FedMUDConfig):
            raise TypeError(f"config must be a FedMUDConfig, got {type(self.config).__name__}")
        cfg = self.config
        plain = _load_plain(model, self.initial_arrays)
        self.state_keys = list(plain.state_dict())
        plan = plan_for_config(plain, cfg)
        self.base_seed = round_seed(self.seed, 0)
        self.factor_seed = round_seed(self.seed, 1)
        self.full: dict[str, np.ndarray] = {}
        if cfg.fedhm:  # the server keeps full weights; the factors come from their truncated SVD every round
            for idx, lp in enumerate(plan.layers):
                w = plain.get_submodule(lp.name).weight.detach()
                if cfg.base_init != "given":
                    w = draw_base(lp.shape, idx, cfg, self.base_seed)
                self.full[lp.name] = w.numpy().astype(np.float32).copy()
        self.dm = build_decomposed(plain, cfg, seed=self.factor_seed, plan=plan, copy_model=False)
        init_base(self.dm, cfg, self.base_seed)
        if cfg.base_init != "given" and plan.layers:
            log.warning(
                "FedMUD: the initial weights of the %d compressed layers (%s) are redrawn from the shared seed "
                "(base_init=%r, so they never travel); base_init='given' keeps the initial arrays you passed",
                len(plan.layers), ", ".join(lp.name for lp in plan.layers), cfg.base_init)
        self.payload_keys = self.dm.payload_keys()
        self._factor_idx = [self.payload_keys.index(k) for k in factor_keys(self.dm)]
        self.payload_spec = tuple(ArraySpec.like(a) for a in self.dm.get_payload())
        self.wire = cfg.to_wire(rho_layer=float(plan.rho_layer), ratio=float(plan.ratio))
        payload = self.dm.get_payload()
        base_bytes = sum(a.nbytes for a in self.dm.base_arrays())
        entry_bytes = sum(payload[i].nbytes for i in self._factor_idx)
        #: most merge-log entries ever useful: a longer catch-up is larger than W_base itself
        self.log_capacity = 0 if cfg.zero_base else max(1, -(-base_bytes // max(1, entry_bytes)))
        self.merges = 0
        self.merge_log: list[tuple[int, int, list[np.ndarray]]] = []  # (merge index, seed, factor arrays)
        self.confirmed: dict[int, int] = {}  # partition -> merges its W_base holds (last valid reply)
        self._round: dict[str, Any] | None = None

    def __repr__(self) -> str:
        c = self.config
        return (f"FedMUDServer(decomp={c.decomp}, pattern={c.pattern}, ratio={self.plan.ratio:.5f}, "
                f"reset_interval={c.reset_interval}, num_partitions={self.num_partitions})")

    @property
    def plan(self):
        """The factor sizes (:class:`~flwr_strategies.fedmud.sizing.ModelPlan`)."""
        return self.dm.plan

    def payload_scalars(self) -> int:
        """Scalars sent per client per direction (factors, dense parameters, BN statistics)."""
        return int(sum(np.prod(s.shape, dtype=np.int64) for s in self.payload_spec))

    # ------------------------------------------------------------------ downlink
    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        cfg = self.config
        if cfg.fedhm:
            self._factorise()
        payload = self.dm.get_payload()
        merges_before = self.merges
        push = cfg.reset_interval is not None and is_push_round(server_round, cfg.reset_interval)
        common = {
            **self.base_config(server_round),
            WIRE_KEY: self.wire,
            "fedmud_seed": int(self.factor_seed),
            "fedmud_push": bool(push),
            "fedmud_new_seed": int(self.factor_seed),
            "fedmud_base_seed": int(self.base_seed),
            "fedmud_merges": int(merges_before),
        }
        plans = {pid: self._sync_plan(pid, merges_before) for pid in partition_ids}
        base_before = self.dm.base_arrays() if any(p[0] for p in plans.values()) else None
        if push:
            entry = [payload[i].copy() for i in self._factor_idx]
            new_seed = round_seed(self.seed, server_round)
            self.dm.merge_and_reset(new_seed)
            self.merge_log.append((merges_before, int(self.factor_seed), entry))
            del self.merge_log[: max(0, len(self.merge_log) - self.log_capacity)]
            self.factor_seed = new_seed
            self.merges += 1
            common["fedmud_new_seed"] = int(new_seed)
        out, sync_bytes = [], 0
        shared: dict[tuple[bool, int], list[np.ndarray]] = {}  # one array list per distinct sync (serialised once)
        for pid in partition_ids:
            full, start, entries = plans[pid]
            cfg_i = {**common, "fedmud_sync_from": int(start), "fedmud_full_base": bool(full),
                     "fedmud_catchup_seeds": ",".join(str(seed) for _, seed, _ in entries)}
            key = (bool(full), int(start) if (full or entries) else -1)
            if key not in shared:
                if full:
                    shared[key] = payload + base_before
                elif entries:
                    shared[key] = payload + [a for _, _, arrs in entries for a in arrs]
                else:
                    shared[key] = payload
            arrays = shared[key]
            sync_bytes += sum(a.nbytes for a in arrays[len(payload):])
            out.append(Instruction(pid, arrays, cfg_i, model_layout=False))
        self._round = {"round": int(server_round), "push": bool(push), "sync_bytes": int(sync_bytes)}
        return out

    def _sync_plan(self, pid: int, merges_before: int) -> tuple[bool, int, list]:
        """(send the full base?, index of the first merge sent, catch-up entries) for one client."""
        if self.config.zero_base:
            return False, 0, []
        known = self.confirmed.get(pid)
        if known is None and self.config.base_init == "given":
            return True, merges_before, []
        start = 0 if known is None else known
        if start >= merges_before:
            return False, merges_before, []
        entries = [e for e in self.merge_log if start <= e[0] < merges_before]
        if len(entries) < merges_before - start or len(entries) >= self.log_capacity:
            return True, merges_before, []  # the catch-up would be larger than W_base itself
        return False, start, entries

    def _factorise(self) -> None:
        payload = self.dm.get_payload()
        for name, deco in self.dm.decompositions():
            lk = [i for i, k in enumerate(self.payload_keys) if k.startswith(name + ".parametrizations.")]
            u, v = svd_factors(self.full[name].reshape(deco.plan.m, deco.plan.n), deco.plan.rank)
            payload[lk[0]], payload[lk[1]] = u, v
        self.dm.set_payload(payload)

    # ------------------------------------------------------------------ uplink
    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        """A reply is the payload: the trainable factors and dense arrays, shapes as sent."""
        return ReplySpec(self.payload_spec)

    def check_reply(self, server_round: int, reply: Reply) -> None:
        if self.config.weighting == "num_examples" and reply.num_examples == 0:
            raise ReplyError(f"partition {reply.partition_id} reported num_examples = 0 (no weight in the average)")

    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        """Direct aggregation (paper Eq. 4): weighted element-wise mean of the payloads; FedHM: mean
        of the recovered products ``U_i V_i`` for the compressed layers. Atomic."""
        info = self._round if self._round is not None and self._round["round"] == server_round else {}
        metrics: dict[str, Any] = {
            "ratio": float(self.plan.ratio),
            "rho_layer": float(self.plan.rho_layer),
            "payload_scalars": self.payload_scalars(),
            "sync_bytes": int(info.get("sync_bytes", 0)),
            "push": int(info.get("push", False)),
        }
        self._round = None
        if not replies:
            return metrics
        weights = aggregation_weights([r.num_examples for r in replies], self.config.weighting)
        avg = weighted_mean([r.arrays for r in replies], weights)
        full = dict(self.full)
        if self.config.fedhm:
            for name, deco in self.dm.decompositions():
                lk = [i for i, k in enumerate(self.payload_keys) if k.startswith(name + ".parametrizations.")]
                acc = np.zeros(deco.plan.shape, dtype=np.float64)
                for w, r in zip(weights, replies):
                    u, v = (np.asarray(r.arrays[i], dtype=np.float64) for i in lk)
                    acc += w * (u @ v).reshape(deco.plan.shape)
                full[name] = acc.astype(np.float32)
        metrics.update(weighted_mean_metrics([(r.num_examples, r.metrics) for r in replies]))
        require_finite("FedMUD's averaged factors", avg)
        require_finite("FedHM's averaged weights", full)
        # commit, but only a finite global model: finite factors can still multiply to inf
        # (W_base + U V with entries near float32's maximum)
        before, before_full = self.dm.get_payload(), self.full
        self.dm.set_payload(avg)
        self.full = full
        try:
            require_finite("FedMUD's new global model", self.global_arrays())
        except FloatingPointError:
            self.dm.set_payload(before)
            self.full = before_full
            raise
        for r in replies:
            self.confirmed[int(r.partition_id)] = self.merges
        return metrics

    # ------------------------------------------------------------------ model views
    def global_arrays(self) -> list[np.ndarray]:
        """Plain weights of the global model in the initial layout: ``W_base + dW(averaged factors)``
        for the compressed layers (FedHM: the full weights), every other entry as averaged."""
        eff = self.dm.effective_state_dict()
        out = []
        for k in self.state_keys:
            owner = k.rpartition(".")[0]
            if self.config.fedhm and k.endswith(".weight") and owner in self.full:
                out.append(self.full[owner].copy())
            else:
                out.append(eff[k].numpy().copy())
        return out

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        pids = np.array(sorted(self.confirmed), dtype=np.int64)
        return {
            "payload": self.dm.get_payload(),
            "base": [] if self.config.zero_base else self.dm.base_arrays(),
            "factor_seed": int(self.factor_seed),
            "merges": int(self.merges),
            "merge_log": [{"index": i, "seed": s, "arrays": list(a)} for i, s, a in self.merge_log],
            "confirmed_ids": pids,
            "confirmed_merges": np.array([self.confirmed[int(p)] for p in pids], dtype=np.int64),
            "full": {k: v.copy() for k, v in self.full.items()},
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        payload = [np.asarray(a) for a in state["payload"]]
        if len(payload) != len(self.payload_spec) or any(
                tuple(a.shape) != s.shape for a, s in zip(payload, self.payload_spec)):
            raise ValueError("checkpoint payload does not match this FedMUD configuration and model")
        self.factor_seed = int(state["factor_seed"])
        if not self.config.zero_base:
            self.dm.set_base_arrays([np.asarray(a) for a in state["base"]])
        self.dm.reset(self.factor_seed)
        self.dm.set_payload(payload)
        self.merges = int(state["merges"])
        self.merge_log = [(int(e["index"]), int(e["seed"]), [np.asarray(a) for a in e["arrays"]])
                          for e in state["merge_log"]]
        ids, counts = np.asarray(state["confirmed_ids"]), np.asarray(state["confirmed_merges"])
        self.confirmed = {int(p): int(c) for p, c in zip(ids, counts)}
        self.full = {k: np.asarray(v, dtype=np.float32) for k, v in state["full"].items()}
        self._round = None
