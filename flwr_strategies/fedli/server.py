"""Server cores of FedLi-LS, FedLi-LU, FedExP and SCAFFOLD (framework-neutral; NumPy in, NumPy out).

All four extend FedAvg's core (:class:`~flwr_strategies.baselines.server.FedAvgServer`): the same
instruction (the global model plus the round's config), the same reply checks and FedAvg's exact
arithmetic for the (weighted) average. They differ in how far the server moves along
``Delta_t = w_t - sum_i p_i w_i`` and in the scalars the clients must report.

Bad replies. Every reply is checked before any state changes by the framework's shared validation
(:mod:`flwr_strategies.core.validation`): arrays against the model (count, shapes, dtype kinds),
NaN/inf in arrays, the method's required scalar (``step_size`` for FedLi-LS, ``train_loss`` for
FedLi-LU) present, numeric and finite, the partition id; the strategies' ``on_bad_reply`` says
whether a bad reply is dropped (the default; ``rejected`` metric) or raises ``ReplyError`` with the
state unchanged. Replies with ``num_examples = 0`` are rejected when the weighting is
``"num_examples"`` (they would carry no weight), as in FedAvg.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from ..baselines.server import FedAvgServer, no_commit
from ..core.messages import Instruction, Reply, ReplySpec
from ..core.server import EvalFn
from ..core.validation import ReplyError, require_finite
from .aggregation import aggregate_delta, aggregation_weights, function_sync, is_float_array
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig
from .dfw import dfw_step

log = logging.getLogger(__name__)
from .fedexp import fedexp_server_step
from .scaffold import scaffold_server_update
from .server_ls import gd_server_step, step_size_sync

__all__ = ["FedLiLSServer", "FedLiLUServer", "FedExPServer", "ScaffoldServer"]

def _norm(arrays: list[np.ndarray]) -> float:
    return float(np.sqrt(sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in arrays if is_float_array(a))))


class _DeltaServer(FedAvgServer):
    """FedAvg's core with a pluggable server step (shared by the four cores)."""

    #: metrics every reply must carry (present, numeric, finite)
    required_metrics: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config}, num_partitions={self.num_partitions}, fraction_train={self.fraction_train})"

    @property
    def weighting(self) -> str:
        """``"num_examples"`` or ``"uniform"``."""
        return self.config.weighting

    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        return ReplySpec(self.model_spec, self.required_metrics)

    def weights(self, replies: list[Reply]) -> np.ndarray:
        """``p_i`` (float64, summing to 1)."""
        return aggregation_weights(self.counts(replies), "num_examples")


class FedLiLSServer(_DeltaServer):
    """FedLi-LS server core: ``w_{t+1} = w_t - eta_g Delta_t`` with ``eta_g`` from StepSizeSync.

    Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning" (Alg. 1, server
    step "GD"). Sends the Armijo constants in every client config; each reply must report the step
    size its line search accepted last (``step_size`` > 0). With ``step_size_sync="unit"`` (default)
    the new model is exactly FedAvg's weighted average of the Armijo clients' models.

    Parameters as :class:`~flwr_strategies.baselines.server.FedAvgServer`, ``config`` a
    :class:`FedLiLSConfig` (``step_size_sync``, ``weighting`` and the clients' ``armijo`` constants).

    Metrics per round: ``eta_g``, ``effective_scale``, ``client_step_max``, ``client_step_mean``,
    ``delta_norm`` and the clients' weighted means (``train_loss``, ``n_backtracks``...).
    """

    config_cls = FedLiLSConfig
    required_metrics = ("step_size",)

    def client_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config.armijo)

    def check_reply(self, server_round: int, reply: Reply) -> None:
        super().check_reply(server_round, reply)
        if float(reply.metrics["step_size"]) <= 0:
            raise ReplyError(f"partition {reply.partition_id} reported step_size {reply.metrics['step_size']!r} <= 0")

    def server_step(self, server_round: int, replies: list[Reply]):
        p = self.weights(replies)
        steps = [float(r.metrics["step_size"]) for r in replies]
        eta_g = step_size_sync(steps, self.config.step_size_sync)
        avg = self.average(replies)
        new = gd_server_step(self.current, avg, eta_g)
        info = {
            "eta_g": float(eta_g),
            "effective_scale": float(eta_g),
            "client_step_max": float(max(steps)),
            "client_step_mean": float(np.dot(p, steps)),
            "delta_norm": _norm(aggregate_delta(self.current, avg)),
        }
        return new, info, no_commit


class FedLiLUServer(_DeltaServer):
    """FedLi-LU server core: one Deep Frank-Wolfe step on the pseudo-gradient (paper Alg. 2).

    Same paper (Alg. 1 with server step "DFW"). With ``f = sum_i p_i train_loss_i`` (FunctionSync),
    ``r = lambda w_t``::

        gamma   = clip((f - eta <Delta_t, r>) / (eta ||Delta_t||^2 + eps), 0, 1)
        w_{t+1} = w_t - eta (r + gamma Delta_t)          (+ DFW momentum when mu > 0)

    Each reply must report ``train_loss`` (numeric, finite). The momentum buffer is checkpointed.

    **Measured degeneracy.** Algorithm 2 is implemented exactly (2e-16 against the formula), but in
    every round of every run measured gamma was clipped at 1: ``f`` is a cross-entropy of order 0.5-2
    while ``Delta_t`` is a displacement of order ``eta_l K ||g||``, so ``f / (eta ||Delta_t||^2)``
    (the ``polyak_ratio`` metric) was 163 to 4,142 over the 100 rounds of the ``fedli`` preset (MNIST,
    client lr 0.01), 38 to 157 on the quickstart setting (digits, lr 0.05), 1,300 to 4,200 in issue
    14's runs, and about 1e5 with the authors' code constants (docs/results/fedli.md). FedLi-LU then
    takes FedAvg's step plus the server weight decay ``eta lambda w``; with ``lambda = 0`` it is FedAvg
    bit for bit. Its accuracy follows the client learning rate, which still needs tuning.

    Parameters as :class:`FedLiLSServer`, ``config`` a :class:`FedLiLUConfig` (the DFW constants,
    ``loss_report``, sent to the clients, and ``weighting``).

    Metrics per round: ``train_loss`` (= ``f``), ``gamma``, ``gamma_raw`` (before clipping),
    ``polyak_ratio``, ``effective_scale``, ``delta_norm``, ``f_g``.
    """

    config_cls = FedLiLUConfig
    required_metrics = ("train_loss",)

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self.momentum: np.ndarray | None = None
        self._warned = False

    def client_config(self) -> dict[str, Any]:
        return {"loss_report": self.config.loss_report}

    def server_step(self, server_round: int, replies: list[Reply]):
        p = self.weights(replies)
        f = function_sync([float(r.metrics["train_loss"]) for r in replies], p)
        avg = self.average(replies)
        new, z, info = dfw_step(self.current, avg, f, self.config.dfw, self.momentum)
        if z is not None:
            require_finite("FedLi-LU's DFW momentum", z)
        if info["gamma"] < 1.0 and not self._warned:
            log.warning(
                "FedLi-LU round %d: the DFW step scaled the clients' update by gamma=%.3g < 1 (f=%.4g, "
                "eta*||Delta||^2=%.4g): the clients moved far relative to their loss, so the step is Polyak-capped "
                "and FedLi-LU learns more slowly than FedAvg at this client learning rate. The paper's clients run "
                "plain SGD; with client momentum 0.9 on Flower's quickstart CNN, lr 0.01 learned and lr 0.05 kept "
                "gamma < 1 from round 1 and lost accuracy (see 'Your optimizer and learning rate' in docs/switch.md).",
                server_round, info["gamma"], f, self.config.dfw.server_eta * info["delta_norm"] ** 2)
            self._warned = True

        def commit() -> None:
            if z is not None:
                self.momentum = z

        return new, {"train_loss": f, **{k: float(v) for k, v in info.items()}}, commit

    def extra_state(self) -> dict[str, Any]:
        out = super().extra_state()
        if self.momentum is not None:
            out["momentum"] = self.momentum
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.momentum = np.array(state["momentum"]) if "momentum" in state else None


class FedExPServer(_DeltaServer):
    """FedExP server core (Jhunjhunwala, Wang, Joshi, ICLR 2023): an extrapolated server step.

    ``eta_g = max(1, 0.5 sum_i p_i ||Delta_i||^2 / (||Dbar||^2 + eps_t))``, ``w_{t+1} = w_t - eta_g Dbar``
    with ``Dbar = sum_i p_i Delta_i``. The default is the paper's form (uniform ``p_i``, constant
    ``eps``); :meth:`FedExPConfig.code` gives the official code's (``S * eps`` decayed by ``0.998**2``
    per round, ``n_i`` weights, last-two average evaluated). Clients run plain SGD.

    Parameters as :class:`FedLiLSServer`, ``config`` a :class:`FedExPConfig` (``eps``,
    ``eps_scaling``, ``eps_decay``, ``weighting``, ``eval_last2_avg``).

    Metrics per round: ``eta_g``, ``eps`` (the value used), ``delta_norm``.
    """

    config_cls = FedExPConfig

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self.previous: list[np.ndarray] | None = None
        self.updates = 0

    def server_step(self, server_round: int, replies: list[Reply]):
        cfg = self.config
        eps = cfg.eps_at(server_round, len(replies))
        weights = None if cfg.weighting == "uniform" else self.weights(replies)
        new, info = fedexp_server_step(self.current, [r.arrays for r in replies], eps, weights)
        old = self.current

        def commit() -> None:
            if cfg.eval_last2_avg:
                self.previous = old if self.updates > 0 else None
            self.updates += 1

        return new, {"eta_g": float(info["eta_g"]), "eps": float(eps), "delta_norm": float(info["delta_norm"])}, commit

    def evaluate(self, server_round: int, evaluate_fn: EvalFn):
        """Central evaluation of the global model, or with ``eval_last2_avg`` of the average of the
        last two global models (once there are two)."""
        arrays = self.current
        if self.config.eval_last2_avg and self.previous is not None:
            arrays = [((a.astype(np.float64) + b.astype(np.float64)) / 2).astype(a.dtype) if is_float_array(a) else a
                      for a, b in zip(self.current, self.previous)]
        return evaluate_fn(server_round, arrays)

    def extra_state(self) -> dict[str, Any]:
        out = super().extra_state()
        out["updates"] = int(self.updates)
        if self.previous is not None:
            out["previous"] = list(self.previous)
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.updates = int(state.get("updates", 0))
        self.previous = [np.array(a) for a in state["previous"]] if "previous" in state else None


class ScaffoldServer(_DeltaServer):
    """SCAFFOLD server core (Karimireddy et al., ICML 2020, option II), a FedLi baseline.

    Wire format: the server sends ``w_t ++ c`` (2L arrays for a model of L arrays) and each client
    replies ``w_i ++ dc_i`` with ``dc_i = c_i+ - c_i``. By default (``control_state="client"``) every
    client keeps its own ``c_i`` in ``context.state`` and **the server keeps no per-client table**:
    its state is ``w_t`` and ``c`` whatever the number of clients. With ``control_state="server"``
    the core keeps ``{partition: c_i}`` (mirroring the clients' ``c_i + dc_i`` exactly) and sends
    ``w_t ++ c ++ c_i`` (3L arrays). Both give the same numbers.

    Server step: ``w_{t+1} = w_t + eta_g sum_i p_i (w_i - w_t)``, ``c <- c + (S/N) mean_i dc_i``
    (paper, uniform) or ``c <- c + sum_i (n_i / n) dc_i`` (the code, ``weighting="num_examples"``).

    Parameters as :class:`FedLiLSServer`, ``config`` a :class:`ScaffoldConfig` (``server_lr``,
    ``control_state``, ``weighting``, ``total_examples``, ``correction_in_clip``, sent to the clients
    as ``scaffold_correction_in_clip``); ``num_partitions`` (N, the ``S/N`` factor) is required.

    Metrics per round: ``control_norm`` (``||c||``) and the clients' weighted means.
    """

    #: N enters the control-variate step (``S/N``): the adapters pass the number of clients.
    needs_num_partitions = True
    config_cls = ScaffoldConfig

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        if self.num_partitions is None:
            raise ValueError("SCAFFOLD needs num_partitions (N, the number of clients, for its S/N control step)")
        self.c_global: list[np.ndarray] = [np.zeros_like(a) for a in self.initial_arrays]
        self.client_controls: dict[int, list[np.ndarray]] = {}

    def client_config(self) -> dict[str, Any]:
        return {"scaffold_correction_in_clip": bool(self.config.correction_in_clip)}

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        cfg = {**self.base_config(server_round), **self.client_config()}
        payload = list(self.current) + list(self.c_global)
        if self.config.control_state == "client":
            return [Instruction(pid, payload, dict(cfg), model_layout=False) for pid in partition_ids]
        zeros = [np.zeros_like(c) for c in self.c_global]
        return [Instruction(pid, payload + list(self.client_controls.get(pid, zeros)), dict(cfg), model_layout=False)
                for pid in partition_ids]

    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        return ReplySpec(self.model_spec + self.model_spec)

    def server_step(self, server_round: int, replies: list[Reply]):
        cfg = self.config
        n_layers = len(self.initial_arrays)
        models = [r.arrays[:n_layers] for r in replies]
        dcs = [r.arrays[n_layers:] for r in replies]
        counts = [int(r.num_examples) for r in replies] if cfg.weighting == "num_examples" else None
        new_w, new_c = scaffold_server_update(self.current, self.c_global, models, dcs, int(self.num_partitions),
                                              cfg.server_lr, num_examples=counts, total_examples=cfg.total_examples)
        table: dict[int, list[np.ndarray]] = {}
        if cfg.control_state == "server":
            for r, dc in zip(replies, dcs):
                old = self.client_controls.get(r.partition_id, [np.zeros_like(c) for c in self.c_global])
                # c_i + dc_i in the array dtype: the same values the client computes
                table[r.partition_id] = [(np.asarray(o, np.float64) + np.asarray(d, np.float64)).astype(np.asarray(o).dtype)
                                         for o, d in zip(old, dc)]
        require_finite("SCAFFOLD's server control variate c", new_c)
        require_finite("SCAFFOLD's client control variates", {str(p): c for p, c in table.items()})

        def commit() -> None:
            self.c_global = new_c
            self.client_controls.update(table)

        return new_w, {"control_norm": _norm(new_c)}, commit

    def extra_state(self) -> dict[str, Any]:
        out = super().extra_state()
        out["c_global"] = list(self.c_global)
        if self.client_controls:
            out["client_controls"] = {str(pid): list(c) for pid, c in self.client_controls.items()}
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.c_global = [np.array(a) for a in state["c_global"]]
        self.client_controls = {int(pid): [np.array(a) for a in c] for pid, c in state.get("client_controls", {}).items()}
