"""Server cores of DO-ADP's baselines: DPDO, DP-DDA, CPGT (framework-neutral; see :mod:`.baselines`).

Each core is a :class:`~flwr_strategies.doadp.peer.PublicTableCore`: it holds only public tables
(what the agents broadcast), relays to every agent what its neighbours sent last round, and sends
no randomness: each agent draws its batch, its noise and (DP-DDA) its sampling coin from its own
private generator. One round = one iteration, pipelined as described in :mod:`.baselines`. The
epsilon each reports is the one of the rounds that ran on the record count the agents report; a
checkpoint carries what that accounting needs (DP-DDA: the accountant's segments; DPDO and CPGT:
their Laplace calibration, which a resumed core must share).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.messages import Instruction, Reply
from ..core.validation import ReplyError
from ..decentralized.mixing import mix
from ..privacy.laplace import calibrate_laplace_b0, pure_dp_epsilon
from .baselines import laplace_schedule
from .config import CPGTConfig, DPDDAConfig, DPDOConfig, auto_step, resolve_k
from .peer import GaussianLedger, PublicTableCore
from .server import check_topk_message

__all__ = ["DPDOServer", "DPDDAServer", "CPGTServer"]


class _BaselineServer(PublicTableCore):
    method = "baseline"

    def __init__(self, initial_arrays, *, lr_decay: float = 1.0, **kwargs: Any) -> None:
        if lr_decay != 1.0:
            raise ValueError(f"{self.method}: the step size decays by its own rule; lr_decay must be 1, got {lr_decay!r}")
        super().__init__(initial_arrays, **kwargs)

    def batch_config(self) -> dict[str, Any]:
        """The clients' minibatch settings: DPDO and CPGT clip per coordinate and sample uniformly."""
        return {"bl_batch_size": self.batch_size, "bl_clip": float(self.config.clip), "bl_clip_mode": "coordinate",
                "bl_sampling": "uniform"}

    def _dense(self, server_round: int, reply: Reply) -> np.ndarray:
        arrays, _ = self.split_report(server_round, reply)
        if len(arrays) != 1 or arrays[0].shape != (self.d,) or arrays[0].dtype.kind != "f":
            got = [(str(a.dtype), a.shape) for a in arrays]
            raise ReplyError(f"partition {reply.partition_id}: expected one float vector of length {self.d}, got {got}")
        return arrays[0].astype(np.float64)

    def check_reply(self, server_round: int, reply: Reply) -> None:
        self._dense(server_round, reply)


class _LaplaceServer(_BaselineServer):
    """DPDO and CPGT: Laplace noise with geometrically decaying scale, accounted in pure DP over the
    releases of :func:`~flwr_strategies.doadp.baselines.laplace_schedule` (``delay``), each of the
    ``variables`` transmitted variables spending an equal share."""

    #: round t releases t - delay data-dependent steps; transmitted variables, each with the schedule
    delay, variables = 1, 1

    @property
    def rate(self) -> float:
        """The batch draw's sampling rate ``b / q`` on the record count that ran."""
        return self.batch_size / self.q_ran

    def _laplace_b0(self) -> float:
        """The Laplace scale b0 that spends the target epsilon at the current step size."""
        c = self.config
        self._sens, self._decay = laplace_schedule(c.clip, self.d, self.alpha, c.rs, c.rn, self.batch_size,
                                                   self.num_rounds, self.delay)
        return calibrate_laplace_b0(c.epsilon / self.variables, self._sens, self._decay, self.rate)

    def epsilon_at(self, rounds: int, q: int | None = None) -> float:
        r = max(0, int(rounds) - self.delay)
        rate = self.rate if q is None else self.batch_size / int(q)
        return self.variables * pure_dp_epsilon(self._sens[:r], self.b0 * self._decay[:r], rate) if r else 0.0

    def _resolve_step(self) -> None:
        """Set b0; with the step size ``"auto"`` first choose it: b0 is proportional to the step, so the
        step is the one whose first release's noise norm ``sqrt(2) b0 sqrt(d)`` is ``step_noise_norm``."""
        self.alpha_rule = "given"
        if self.alpha is None:
            self.alpha = 1.0
            unit = math.sqrt(2.0 * self.d) * self._laplace_b0()
            self.alpha = auto_step(unit, self.config.step_noise_norm)
            self.alpha_rule = (f"auto: step_noise_norm {self.config.step_noise_norm:g} / (sqrt(2 d) b0 of a unit "
                               f"step, {unit:.6g})")
        self.b0 = self._laplace_b0()

    def noise_metrics(self, server_round: int) -> dict[str, float]:
        """The round's Laplace scale, the norm of the noise it adds (``sqrt(2 d)`` times it) and the step."""
        scale = self.b0 * self.config.rn ** (server_round - 1)
        return {"laplace_scale": scale, "step_noise_norm": math.sqrt(2.0 * self.d) * scale,
                "alpha": self.alpha * self.config.rs ** (server_round - 1)}

    def calibration(self) -> dict[str, float]:
        """What the pure-DP accounting of earlier rounds depends on (checked when resuming)."""
        c = self.config
        return {"b0": float(self.b0), "alpha": self.alpha, "rs": float(c.rs), "rn": float(c.rn),
                "clip": float(c.clip), "batch_size": float(self.batch_size)}

    def laplace_state(self) -> dict[str, Any]:
        return {"peer": self.peer_state(), "calibration": self.calibration()}

    def load_laplace_state(self, state: dict[str, Any]) -> None:
        ran, own = state.get("calibration"), self.calibration()
        if ran is None:
            raise ValueError("checkpoint carries no calibration: the rounds it ran cannot be accounted")
        diff = [f"{k}={ran.get(k)!r} there, {v!r} here" for k, v in own.items()
                if not math.isclose(float(ran.get(k, math.nan)), v, rel_tol=1e-12)]
        if diff:
            raise ValueError(f"{self.method}: the checkpoint ran with another calibration ({'; '.join(diff)}); its "
                             "pure-DP accounting needs the same: resume with the checkpoint's settings")
        self.load_peer_state(state["peer"])


class DPDOServer(_LaplaceServer):
    """DPDO (Huang, Mitra, Vaidya, "Differentially private distributed optimization", ICDCN 2015),
    the baseline of Huo et al. (Sec. V-A, Table I): broadcast ``y = x + Laplace(b0 rn^t)``, mix
    ``z = W y``, step ``x = z - c rs^t g(z)``. Pure epsilon-DP, certified: the Laplace scale b0 is
    the smallest for which the amplified, composed releases stay within ``epsilon`` over
    ``num_rounds`` (see :mod:`.baselines`).

    Parameters
    ----------
    initial_arrays, num_partitions, num_rounds, dataset_size, batch_size
        As :class:`~flwr_strategies.doadp.server.DOADPServer`.
    alpha : float | str (default: 0.01)
        c, the initial step size (decays by ``rs`` per round); ``"auto"``: the c whose first
        broadcast's noise norm ``sqrt(2 d) b0`` is ``config.step_noise_norm`` (b0 grows with c).
    config : DPDOConfig
        epsilon, clip, rs, rn, eval_every, evaluate_private.
    """

    method = "dpdo"
    config_cls = DPDOConfig

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self._resolve_step()
        self.Y = np.tile(self.x0, (self.n, 1))

    def _laplace_b0(self) -> float:
        if self.num_rounds > 1:
            return super()._laplace_b0()
        # no release depends on data; use the unbounded-horizon closed form (more noise)
        c = self.config
        self._sens, self._decay = np.zeros(0), np.zeros(0)
        return 2.0 * c.clip * math.sqrt(self.d) * self.alpha / self.batch_size / (c.epsilon * (c.rn - c.rs))

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        self.check_round(server_round)
        Z = mix(self.mixing_of(server_round, partition_ids), self.Y)
        c = self.config
        cfg = {**self.round_config(server_round), **self.batch_config(), "dpdo_c": self.alpha, "dpdo_rs": c.rs,
               "dpdo_rn": c.rn, "dpdo_b0": self.b0}
        return [Instruction(pid, [Z[pid]] if self.started[pid] else [self.x0],
                            {**cfg, "bl_init": int(not self.started[pid])}, model_layout=False) for pid in partition_ids]

    def apply(self, server_round: int, replies: list[Reply], q: int) -> dict[str, Any]:
        rows = {r.partition_id: self._dense(server_round, r) for r in replies}
        for pid, y in rows.items():
            self.Y[pid] = y
        return {"broadcasts": len(rows), "p2p_bytes": self.p2p_links(server_round, rows) * self.d * 8,
                **self.noise_metrics(server_round)}

    def privacy_metrics(self, server_round: int) -> dict[str, Any]:
        return {"dp_epsilon": self.epsilon_at(server_round), "dp_delta": 0.0}

    def public_model(self) -> np.ndarray:
        return self.Y.mean(axis=0)

    def privacy_report(self) -> dict[str, Any]:
        return {"method": "dpdo", "target_epsilon": self.config.epsilon, "target_delta": 0.0, "b0": self.b0,
                "alpha": self.alpha, "alpha_rule": self.alpha_rule,
                "q": self.q, "q_ran": self.q_ran, "certified_epsilon_planned": self.epsilon_at(self.num_rounds),
                "accounting": "pure DP: Laplace mechanism per release, amplified by the uniform batch draw "
                              "(replace-one), basic composition"}

    def extra_state(self) -> dict[str, Any]:
        return {"Y": self.Y.copy(), **self.laplace_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        Y = self.table_of(state, "Y")
        self.load_laplace_state(state)
        self.Y = Y


class DPDDAServer(GaussianLedger, _BaselineServer):
    """DP-DDA (Liu, Johansson, Shi, "Differentially private distributed dual averaging with node
    sampling", Automatica 2024), the baseline of Huo et al. (Sec. V-A, Table I), as
    :class:`~flwr_strategies.doadp.config.DPDDAConfig` describes it. The reported epsilon is certified
    by DO-ADP's standard accountant (:class:`~flwr_strategies.privacy.accountant.GaussianSteps`) over
    the rounds that ran, every round a possible sampled step (node sampling is not credited).

    Parameters
    ----------
    initial_arrays, num_partitions, num_rounds, dataset_size, batch_size
        As :class:`~flwr_strategies.doadp.server.DOADPServer` (alpha is unused, ``"auto"``
        included: the step is set by ``beta0``, from the noise rule when None, and ``reg``).
    config : DPDDAConfig
        epsilon, delta, p_s, beta0, reg, clip, clip_mode, sampling, calibration, delta0, sigma,
        eval_every, evaluate_private.
    """

    method = "dp-dda"
    config_cls = DPDDAConfig

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self.init_ledger()
        c = self.config
        self.calibrate(c.p_s, self.d, "DP-DDA: sigma={:.6g}", f" (the Theorem 1 chain credits p_s^2 with "
                       f"p_s={c.p_s:g}, which is not certifiable); use calibration='accountant'", allow_low_p=True)
        if c.beta0 is None:
            self.beta0 = self.sigma * math.sqrt(self.d) / c.step_noise_norm
            self.beta0_rule = (f"auto: sigma {self.sigma:.6g} * sqrt(d {self.d}) / step_noise_norm "
                               f"{c.step_noise_norm:g}")
        else:
            self.beta0, self.beta0_rule = float(c.beta0), "given"
        self.reg = 1.0 / self.q if c.reg is None else float(c.reg)
        self.Z = np.zeros((self.n, self.d))
        self.sampled_steps = np.zeros(self.n, dtype=np.int64)

    def step_counts(self) -> np.ndarray:
        return self.sampled_steps

    def batch_config(self) -> dict[str, Any]:
        return {**super().batch_config(), "bl_clip_mode": self.config.clip_mode, "bl_sampling": self.config.sampling}

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        self.check_round(server_round)
        M = mix(self.mixing_of(server_round, partition_ids), self.Z)
        c = self.config
        cfg = {**self.round_config(server_round), **self.batch_config(), "dpdda_p_s": c.p_s,
               "dpdda_sigma": self.sigma, "dpdda_reg": self.reg, "dpdda_beta0": self.beta0}
        return [Instruction(pid, [M[pid]] + self.start_arrays(pid), {**cfg, "bl_init": int(not self.started[pid])},
                            model_layout=False) for pid in partition_ids]

    def apply(self, server_round: int, replies: list[Reply], q: int) -> dict[str, Any]:
        rows = {r.partition_id: self._dense(server_round, r) for r in replies}
        sampled = [r.partition_id for r in replies if int(r.metrics.get("dpdda_sampled", 0))]
        for pid, z in rows.items():
            self.Z[pid] = z
        self.sampled_steps[sampled] += 1
        return {"sampled": len(sampled), "sigma": self.sigma, "beta0": self.beta0,
                "step_noise_norm": self.sigma * math.sqrt(self.d) / self.beta0,
                "p2p_bytes": self.p2p_links(server_round, rows) * self.d * 8}

    def privacy_metrics(self, server_round: int) -> dict[str, Any]:
        return {"dp_epsilon": self.epsilon_at(server_round), "dp_delta": self.config.delta}

    def public_model(self) -> np.ndarray:
        r = self.server_round
        return -self.Z.mean(axis=0) / (r * self.reg + self.beta0 * math.sqrt(r))

    def privacy_report(self) -> dict[str, Any]:
        c = self.config
        return {"method": "dp-dda", "target_epsilon": c.epsilon, "target_delta": c.delta, "sigma": self.sigma,
                "beta0": self.beta0, "beta0_rule": self.beta0_rule,
                "calibration": "given sigma" if c.sigma is not None else c.calibration, "q": self.q,
                "q_ran": self.q_ran, "certified_epsilon_planned": self.planned_epsilon,
                "accountant": self.mechanism().accountant, "resumed_segments": len(self.past),
                "not_credited": "node sampling p_s (a non-sampled node adds exactly 0)"}

    def extra_state(self) -> dict[str, Any]:
        return {"Z": self.Z.copy(), "sampled_steps": self.sampled_steps.copy(), "peer": self.peer_state(),
                "accountant": self.ledger_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        Z = self.table_of(state, "Z")
        if "accountant" not in state:
            raise ValueError("checkpoint carries no privacy accountant: the steps it ran cannot be accounted")
        self.load_peer_state(state["peer"])
        self.Z = Z
        self.sampled_steps = np.array(state["sampled_steps"], dtype=np.int64)
        self.load_ledger(state["accountant"])


class CPGTServer(_LaplaceServer):
    """CPGT (Xie, Yi, Wang, Cao, Ren, "Compressed differentially private distributed optimization
    with linear convergence", IFAC 2023), the baseline of Huo et al. (Sec. V-A, Table I): compressed
    gradient tracking with Laplace noise on both transmitted variables before Top-k.

    The Laplace scale follows a heuristic calibration (half the budget per variable, per-release L1
    sensitivity ``2 G sqrt(d) lr rs^t / b``, amplified by the batch draw). It is NOT a certified
    guarantee: the tracker y carries every past gradient, so one release's sensitivity is not bounded
    by one step's. Reported as ``epsilon_heuristic`` (``dp_certified = 0``).

    Parameters
    ----------
    initial_arrays, num_partitions, num_rounds, dataset_size, batch_size
        As :class:`~flwr_strategies.doadp.server.DOADPServer`.
    alpha : float | str (default: 0.01)
        Initial step size lr (decays by ``rs`` per round); ``"auto"`` as for DPDO.
    config : CPGTConfig
        epsilon, k_frac, a, g_cons, rs, rn, clip, eval_every, evaluate_private.
    """

    method = "cpgt"
    config_cls = CPGTConfig
    message_arrays = 4
    delay, variables = 0, 2

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self.k = resolve_k(self.config.k_frac, self.d)
        self._resolve_step()
        self.H = {"x": np.zeros((self.n, self.d)), "y": np.zeros((self.n, self.d))}
        self.completion: list[np.ndarray] | None = None  # hat_x, hatw_x, hat_y, hatw_y of the last round

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        self.check_round(server_round)
        self.mixing_of(server_round, partition_ids)
        c = self.config
        cfg = {**self.round_config(server_round), **self.batch_config(), "cpgt_k": self.k, "cpgt_lr": self.alpha,
               "cpgt_rs": c.rs, "cpgt_rn": c.rn, "cpgt_b0": self.b0, "cpgt_g_cons": c.g_cons}
        out = []
        for pid in partition_ids:
            init = int(not self.started[pid] or self.completion is None)
            start = [self.x0] if init else [tab[pid] for tab in self.completion]
            arrays = start + [self.H["x"][pid], self.H["y"][pid]]
            out.append(Instruction(pid, arrays, {**cfg, "bl_init": init}, model_layout=False))
        return out

    def _messages(self, server_round: int, reply: Reply):
        arrays, _ = self.split_report(server_round, reply)
        if len(arrays) != 4:
            raise ReplyError(f"partition {reply.partition_id}: expected 4 arrays (idx_x, val_x, idx_y, val_y), "
                             f"got {len(arrays)}")
        out = []
        for idx, val in (arrays[:2], arrays[2:]):
            problem = check_topk_message(idx, val, self.k, self.d, "float64")
            if problem:
                raise ReplyError(f"partition {reply.partition_id}: {problem}")
            out.append((idx.astype(np.int64), val.astype(np.float64)))
        return out

    def check_reply(self, server_round: int, reply: Reply) -> None:
        self._messages(server_round, reply)

    def apply(self, server_round: int, replies: list[Reply], q: int) -> dict[str, Any]:
        if replies:  # a round with no valid reply leaves every table as it was
            self._absorb(server_round, replies)
        return {"broadcasts": len(replies),
                "p2p_bytes": self.p2p_links(server_round, [r.partition_id for r in replies]) * 2 * self.k * 16,
                **self.noise_metrics(server_round)}

    def privacy_metrics(self, server_round: int) -> dict[str, Any]:
        return {"epsilon_heuristic": self.epsilon_at(server_round), "dp_certified": 0}

    def _absorb(self, server_round: int, replies: list[Reply]) -> None:
        Q = {"x": np.zeros((self.n, self.d)), "y": np.zeros((self.n, self.d))}
        for r in replies:
            (ix, vx), (iy, vy) = self._messages(server_round, r)
            Q["x"][r.partition_id, ix] = vx
            Q["y"][r.partition_id, iy] = vy
        W, a = self.mixing_of(server_round), self.config.a
        hat = {v: self.H[v] + Q[v] for v in ("x", "y")}
        self.completion = [hat["x"], mix(W, hat["x"]), hat["y"], mix(W, hat["y"])]
        self.H = {v: (1.0 - a) * self.H[v] + a * hat[v] for v in ("x", "y")}

    def public_model(self) -> np.ndarray:
        return self.H["x"].mean(axis=0)

    def privacy_report(self) -> dict[str, Any]:
        return {"method": "cpgt", "nominal_epsilon": self.config.epsilon, "b0": self.b0, "certified": False,
                "alpha": self.alpha, "alpha_rule": self.alpha_rule,
                "q": self.q, "q_ran": self.q_ran,
                "note": "a heuristic Laplace calibration; the tracker's sensitivity is not bounded per step"}

    def extra_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"Hx": self.H["x"].copy(), "Hy": self.H["y"].copy(), **self.laplace_state()}
        if self.completion is not None:
            out["completion"] = [a.copy() for a in self.completion]
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        H = {"x": self.table_of(state, "Hx"), "y": self.table_of(state, "Hy")}
        self.load_laplace_state(state)
        self.H = H
        self.completion = [np.array(a) for a in state["completion"]] if "completion" in state else None
