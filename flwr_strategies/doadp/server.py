"""Server cores of DO-ADP and D-mSGD (framework-neutral: NumPy in, NumPy out).

One round = one iteration t of Algorithm 1 (Huo et al.). The core holds the public copies XHAT
(n x d; every neighbour's copy of agent j is the same vector, so one table suffices) and sends
agent i its consensus term ``cons_i = gamma * sum_j w_ij (xhat_j - xhat_i)`` plus the round's
hyperparameters. It sends no seed and no activation draw: each agent flips its own coin, draws its
own batch and noise from randomness only it holds, and replies with its Top-k message (k int
indices, k values of the message dtype) and ``doadp_active = 1`` when active, or with two empty
arrays and ``doadp_active = 0`` when inactive; a reply with no arrays, or whose arrays and
``doadp_active`` disagree, is rejected (a failure, never taken for an inactive agent). The server
learns who was active from the replies, as any observer of the network would.

Consistency of the public copies: the core counts the messages it applied per agent and sends that
count (``doadp_accepted``) every round; the agent keeps its last message pending until the count
confirms it, and rolls it back otherwise (:func:`.algorithm.reconcile`). A reply is checked whole
before anything changes (indices: integer dtype, in range, distinct, exactly k of them; values:
finite, k of them) and a round's updates are committed only after every reply was processed.

Privacy (see :mod:`flwr_strategies.privacy.accountant`): the noise std sigma comes from Theorem 1
(``calibration="theorem1"``, the paper's) or from a standard accountant (``"accountant"``). Either
way the epsilon the core *reports first* is the one dp_accounting certifies for the mechanism that
runs (``dp_epsilon`` at ``dp_delta``), with no credit for the activation probability p or for Top-k
(neither is certifiable: activation is visible, and error feedback eventually sends every noisy
coordinate). The paper's Theorem 1 bound is reported beside it as ``theorem1_epsilon`` /
``theorem1_delta`` (it credits p^2 and k/d). A run whose sigma does not certify the target
(epsilon, delta) is refused at construction. The reported epsilon is the one of what ran
(:class:`~flwr_strategies.doadp.peer.GaussianLedger`, :class:`~flwr_strategies.doadp.peer.DatasetSizeError`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..core.messages import Instruction, Reply
from ..core.validation import ReplyError, check_number
from ..decentralized.mixing import mix
from ..privacy.flower_accountant import AmplifiedAccountant, check_budget, doadp_event, privacy_config_for
from ..privacy.doadp_accountant import doadp_privacy
from .config import DMSGDConfig, DOADPConfig, auto_step, resolve_k
from .peer import GaussianLedger, PublicTableCore

__all__ = ["DOADPServer", "DMSGDServer", "check_topk_message"]


def check_topk_message(idx: np.ndarray, val: np.ndarray, k: int, d: int, value_dtype: str) -> str | None:
    """The problem with a Top-k message ``(indices, values)``, or None when it is well formed:
    exactly k integer indices, all in ``[0, d)`` and distinct, and k values of exactly
    ``value_dtype`` (the message dtype both ends round to; another float dtype is refused, not cast)."""
    if idx.dtype.kind not in "iu":
        return f"Top-k indices must have an integer dtype, got {idx.dtype}"
    if val.dtype != np.dtype(value_dtype):
        return f"Top-k values must have dtype {np.dtype(value_dtype)} (the message dtype), got {val.dtype}"
    if idx.shape != (k,) or val.shape != (k,):
        return f"a Top-k message has k={k} indices and values, got shapes {idx.shape} and {val.shape}"
    if k and (int(idx.min()) < 0 or int(idx.max()) >= d):
        return f"Top-k indices must lie in [0, {d}), got min {int(idx.min())} and max {int(idx.max())}"
    srt = idx if k < 2 or (idx[1:] > idx[:-1]).all() else np.sort(idx)  # our clients send them sorted
    if k > 1 and not (srt[1:] != srt[:-1]).all():
        return "Top-k indices must be distinct (duplicate index)"
    return None


class DOADPServer(GaussianLedger, PublicTableCore):
    """DO-ADP (Huo, Liu, Ding, Johansson, Shi, "Decentralized Optimization with Amplified Privacy via
    Efficient Communication", arXiv 2506.07102): the peer network's public side.

    Parameters
    ----------
    initial_arrays, num_partitions, num_rounds, dataset_size
        As :class:`~flwr_strategies.doadp.peer.PublicTableCore` (paper: n = 20 agents); the noise is
        calibrated for the ``num_rounds`` private steps T at the sampling rate b/q.
    alpha : float | str (default: 0.01, paper CNN)
        Step size, > 0, or ``"auto"``. Each step adds Gaussian noise of norm about
        ``alpha * sigma * sqrt(d)`` to an agent's model (reported as ``step_noise_norm``). Measured on
        Flower's quickstart CNN on MNIST (44k parameters, 200 rounds, ``python -m simulations bench
        doadp_stepsize``): the training loss stayed bounded up to a noise norm of 2.5 and diverged
        from 4.5 on (:data:`~flwr_strategies.doadp.config.STEP_NOISE_BOUND`). ``"auto"``: once sigma
        is calibrated, ``alpha = config.step_noise_norm / (sigma sqrt(d))`` (reported as
        ``alpha`` every round).
    lr_decay : float (default: 1.0, paper: constant)
        Per-round decay of the step size (round r uses ``alpha * lr_decay**(r-1)``), in (0, 1].
    batch_size : int (default: 32; the paper uses 1)
        b, records per private step, in [1, q].
    config : DOADPConfig (default: DOADPConfig())
        Privacy, activation, sparsification, consensus and evaluation settings.
    **kwargs
        :class:`~flwr_strategies.doadp.peer.PublicTableCore` graph arguments (graph, topology,
        seed, on_train_config); ``eval_every``/``evaluate_private`` come from ``config``.
    """

    message_arrays = 2  # [indices, values]
    config_cls = DOADPConfig

    def __init__(self, initial_arrays, *, num_partitions: int, num_rounds: int, dataset_size: int,
                 alpha: float = 0.01, batch_size: int = 32, config: DOADPConfig | None = None, lr_decay: float = 1.0,
                 accountant: Any = None, **kwargs: Any) -> None:
        super().__init__(initial_arrays, num_partitions=num_partitions, num_rounds=num_rounds,
                         dataset_size=dataset_size, alpha=alpha, batch_size=batch_size, config=config, **kwargs)
        self.lr_decay = check_number("lr_decay", lr_decay, "in (0, 1]", lambda v: 0 < v <= 1)
        self.init_ledger()
        self.k = resolve_k(self.config.k_frac, self.d)
        self.sigma = self._calibrate()
        self.alpha_rule = "given"
        if self.alpha is None:
            self._auto_alpha()
        self.accountant = self._accountant(accountant) if self.private else None
        self._composed_through = 0  # rounds composed into the accountant
        self.XHAT = np.zeros((self.n, self.d)) if self.config.public_copy == "zero" else np.tile(self.x0, (self.n, 1))
        self.accepted = np.zeros(self.n, dtype=np.int64)
        self.active_steps = np.zeros(self.n, dtype=np.int64)
        self._parsed: dict = {}  # (round, partition) -> (reply, parsed message), filled by check_reply

    # ------------------------------------------------------------------ settings
    def step_counts(self) -> np.ndarray:
        return self.active_steps

    def _calibrate(self) -> float:
        c = self.config
        source = "the given sigma" if c.sigma is not None else "Theorem 1's sigma"
        return self.calibrate(c.p, self.k, f"DO-ADP: {source} ({{:.6g}})",
                              f". Theorem 1 credits p^2 (p={c.p:g}) and k/d (k_frac={c.k_frac:g}), which no standard "
                              "accountant certifies; use calibration='accountant' or a larger epsilon",
                              clip_mode=c.clip_mode, mode="paper", allow_low_p=c.allow_low_p)

    def _auto_alpha(self) -> None:
        """``alpha = step_noise_norm / (sigma sqrt(d))``: the step whose noise norm is the target."""
        self.alpha = auto_step(self.sigma * math.sqrt(self.d), self.config.step_noise_norm)
        self.alpha_rule = (f"auto: step_noise_norm {self.config.step_noise_norm:g} / (sigma {self.sigma:.6g} * "
                           f"sqrt(d {self.d}))")

    def alpha_at(self, server_round: int) -> float:
        """Step size of ``server_round``: ``alpha * lr_decay**(server_round - 1)``."""
        return self.alpha * self.lr_decay ** max(0, int(server_round) - 1)

    def step_noise_norm(self, server_round: int) -> float:
        """``alpha_t * sigma * sqrt(d)``: the expected norm of the noise one step adds to a model."""
        return float(self.alpha_at(server_round) * self.sigma * math.sqrt(self.d))

    def params_config(self, server_round: int = 1) -> dict[str, Any]:
        """The per-step hyperparameters every agent gets (``doadp_*`` keys)."""
        c = self.config
        return {
            "doadp_private": 1, "doadp_alpha": self.alpha_at(server_round), "doadp_beta": c.beta, "doadp_p": c.p,
            "doadp_k": int(self.k), "doadp_sigma": float(self.sigma), "doadp_clip": float(c.clip),
            "doadp_clip_mode": c.clip_mode, "doadp_batch_size": self.batch_size, "doadp_sampling": c.sampling,
            "doadp_msg_dtype": c.msg_dtype, "doadp_public_copy": c.public_copy,
        }

    # ------------------------------------------------------------------ privacy reports
    def guarantee(self, rounds: int) -> dict[str, float]:
        """Certified (epsilon, delta) after ``rounds`` rounds that ran (every agent stepping in every
        round, on the record count that ran, composed over resumed runs), and Theorem 1's bound beside it."""
        c = self.config
        out = {"dp_epsilon": self.epsilon_at(rounds) if rounds else 0.0, "dp_delta": c.delta}
        if rounds:
            sigma = min([self.sigma] + [s["sigma"] for s in self.past])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rep = doadp_privacy(sigma, c.delta0, int(rounds), c.p, self.k, self.d, self.q_ran, c.clip,
                                    batch_size=self.batch_size, clip_mode=c.clip_mode, mode="paper",
                                    allow_low_p=c.allow_low_p)
            out["theorem1_epsilon"] = rep.eps_tilde
            out["theorem1_delta"] = rep.delta_tilde
        return out

    def privacy_report(self) -> dict[str, Any]:
        """How privacy is calibrated and reported (strings included; for results files)."""
        c = self.config
        mech = self.mechanism()
        return {
            "method": "doadp",
            "target_epsilon": c.epsilon, "target_delta": c.delta,
            "calibration": "given sigma" if c.sigma is not None else c.calibration,
            "sigma": self.sigma, "alpha": self.alpha, "alpha_rule": self.alpha_rule,
            "step_noise_norm": self.step_noise_norm(1), "k": self.k, "d": self.d, "q": self.q,
            "q_ran": self.q_ran,
            "batch_size": self.batch_size, "rounds": self.num_rounds, "sampling": c.sampling,
            "accountant": mech.accountant, "adjacency": "replace-one", "noise_multiplier": mech.noise_multiplier,
            "certified_epsilon_planned": self.planned_epsilon,
            **{f"planned_{k}": v for k, v in self.guarantee(self.num_rounds).items()},
            "resumed_segments": len(self.past),
            "not_credited": "activation probability p (activation is visible) and Top-k k/d "
                            "(error feedback eventually sends every noisy coordinate); Theorem 1 credits both",
            "evaluation": "average of private models x_i (simulation only, OUTSIDE the guarantee)"
            if c.evaluate_private else "average of the public copies (post-processing, inside the guarantee)",
        }

    # ------------------------------------------------------------------ rounds
    def consensus(self, W) -> np.ndarray:
        """``gamma * (W XHAT - XHAT)`` for every agent (one extra table)."""
        C = mix(W, self.XHAT)
        np.subtract(C, self.XHAT, out=C)
        C *= self.config.gamma
        return C

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        self.check_round(server_round)
        if self.private:  # stop before the round whose release would pass the accountant's max_epsilon
            check_budget(self.accountant, doadp_event(self.mechanism()), f"{type(self).__name__} round {server_round}",
                         count=max(1, int(server_round) - self._composed_through))
        C = self.consensus(self.mixing_of(server_round, partition_ids))
        cfg = {**self.round_config(server_round), **self.params_config(server_round)}
        return [Instruction(pid, [C[pid]] + self.start_arrays(pid), {**cfg, "doadp_accepted": int(self.accepted[pid])},
                            model_layout=False) for pid in partition_ids]

    def _message(self, server_round: int, reply: Reply) -> tuple[np.ndarray, np.ndarray] | None:
        cached = self._parsed.get((server_round, reply.partition_id))
        if cached is not None and cached[0] is reply:
            return cached[1]
        arrays, _ = self.split_report(server_round, reply)
        pid = reply.partition_id
        if len(arrays) != 2:
            raise ReplyError(
                f"partition {pid}: expected [indices, values] (a Top-k message, or two empty arrays from an "
                f"inactive agent), got {len(arrays)} arrays"
            )
        active = reply.metrics.get("doadp_active")
        if isinstance(active, bool) or active not in (0, 1):
            raise ReplyError(f"partition {pid}: metric 'doadp_active' must be 0 (inactive) or 1 (active), "
                             f"got {active!r}")
        idx, val = arrays
        if not active:
            if idx.size or val.size or idx.dtype.kind not in "iu" or val.dtype != np.dtype(self.config.msg_dtype):
                raise ReplyError(
                    f"partition {pid}: an inactive agent (doadp_active=0) sends two empty arrays (integer indices, "
                    f"{self.config.msg_dtype} values), got {idx.dtype} {idx.shape} and {val.dtype} {val.shape}"
                )
            return None
        problem = check_topk_message(idx, val, int(self.k), self.d, self.config.msg_dtype)
        if problem:
            raise ReplyError(f"partition {reply.partition_id}: {problem}")
        out = idx.astype(np.int64), val.astype(self.config.msg_dtype).astype(np.float64)
        self._parsed[(server_round, reply.partition_id)] = (reply, out)
        return out

    def check_reply(self, server_round: int, reply: Reply) -> None:
        self._message(server_round, reply)

    def apply(self, server_round: int, replies: list[Reply], q: int) -> dict[str, Any]:
        # compute everything first (parse and check every message; no table is touched) ...
        self._parsed = {key: v for key, v in self._parsed.items() if key[0] == server_round}
        rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        losses = []
        for r in replies:
            msg = self._message(server_round, r)
            if msg is None:
                continue
            rows[r.partition_id] = msg
            if "train_loss" in r.metrics:
                losses.append(float(r.metrics["train_loss"]))
        p2p = self.p2p_links(server_round, rows) * int(self.k) * (np.dtype(self.config.msg_dtype).itemsize + 8)
        # ... then commit: validated, distinct in-range indices, so the in-place adds cannot fail
        for pid, (idx, val) in rows.items():
            self.XHAT[pid, idx] += val
            self.accepted[pid] += 1
            self.active_steps[pid] += 1
        if self.private:
            self._compose_round(server_round, q)
        self._parsed = {}
        n_act = len(rows)
        metrics: dict[str, Any] = {
            "active": n_act,
            "inactive": len(replies) - n_act,
            "paper_rate": n_act * int(self.k) / (self.n * self.d),
            "p2p_bytes": p2p,
            "alpha": self.alpha_at(server_round),
        }
        if self.private:
            metrics["sigma"] = float(self.sigma)
            metrics["step_noise_norm"] = self.step_noise_norm(server_round)
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        return metrics

    def privacy_metrics(self, server_round: int) -> dict[str, Any]:
        # worst case: every agent active every round
        return {**self.guarantee(server_round), "dp_epsilon_observed": self.observed_epsilon()}

    def public_model(self) -> np.ndarray:
        """The average of the public copies (inside the guarantee)."""
        return self.XHAT.mean(axis=0)

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        out = {"XHAT": self.XHAT.copy(), "accepted": self.accepted.copy(), "active_steps": self.active_steps.copy(),
               "peer": self.peer_state()}
        if self.private:
            out["accountant"] = self.ledger_state()
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        XHAT = self.table_of(state, "XHAT")
        if self.private and "accountant" not in state:
            raise ValueError("checkpoint carries no privacy accountant: the steps it ran cannot be accounted")
        self.load_peer_state(state["peer"])
        self.XHAT = XHAT
        self.accepted = np.array(state["accepted"], dtype=np.int64)
        self.active_steps = np.array(state["active_steps"], dtype=np.int64)
        if self.private:
            self.load_ledger(state["accountant"])
            self._recompose(getattr(self, "_checkpoint_round", self.rounds_before), self.q_ran)

    # ------------------------------------------------------------------ Flower's PrivacyAccountant
    def _accountant(self, given: Any) -> Any:
        """The accountant every round is composed into: ``given`` (a Flower ``PrivacyAccountant`` whose
        configuration matches what runs: replace-one adjacency, this sampling, q records, the target delta)
        or an :class:`~flwr_strategies.privacy.AmplifiedAccountant` without ``max_epsilon`` (the target
        already holds over the planned rounds, checked at construction; a run resumed from a checkpoint
        that spent more keeps reporting what ran)."""
        c = self.config
        wanted = privacy_config_for(self.mechanism(), c.delta)
        if given is None:
            return AmplifiedAccountant(wanted, method="DO-ADP")
        for name in ("compose", "would_exceed", "get_privacy_spent", "state_dict", "load_state_dict"):
            if not callable(getattr(given, name, None)):
                raise TypeError(f"accountant must be a flwr.serverapp.PrivacyAccountant (no {name}()), got "
                                f"{type(given).__name__}")
        have = given.config
        for field in ("target_delta", "population_size", "neighboring_relation", "sampling_method"):
            if getattr(have, field) != getattr(wanted, field):
                raise ValueError(f"accountant.config.{field}={getattr(have, field)!r} does not match what DO-ADP "
                                 f"runs ({field}={getattr(wanted, field)!r}: delta, local_dataset_size, replace-one "
                                 f"adjacency, sampling={c.sampling!r})")
        if given.num_releases:
            raise ValueError(f"accountant has {given.num_releases} releases composed already; pass a fresh one "
                             "(a resumed run recomposes what its checkpoint ran)")
        return given

    def _compose(self, accountant: Any, mech: Any, n: int) -> None:
        """Compose ``n`` rounds of ``mech`` into ``accountant`` (an AmplifiedAccountant also records what ran,
        activation and Top-k included, which are not credited)."""
        ran = {"p": self.config.p, "k_frac": self.k / self.d, "clip": mech.clip, "sigma": mech.sigma,
               "batch_size": mech.batch_size, "dataset_size": mech.dataset_size}
        extra = {"ran": ran} if isinstance(accountant, AmplifiedAccountant) else {}
        accountant.compose(doadp_event(mech), n, **extra)

    def round_not_aggregated(self, server_round: int) -> None:
        """A round without a valid reply still went out: its agents may have released, so it is
        composed (on the records of the last round that ran)."""
        if self.private:
            self._compose_round(server_round, self.q_ran)

    def _compose_round(self, server_round: int, q: int) -> None:
        """Compose the rounds that ran up to ``server_round`` (this one, and any rejected one before it:
        its instructions went out, so its agents may have released; every agent may have stepped, since
        activation is not credited) on the ``q`` records they ran on; a smaller q than before
        recomposes every round on it."""
        if q != self.accountant.config.population_size:
            self._recompose(self._composed_through, q)
        n = int(server_round) - self._composed_through
        if n <= 0:
            return
        self._compose(self.accountant, self.mechanism(q), n)
        self._composed_through = int(server_round)

    def _recompose(self, rounds: int, q: int) -> None:
        """Rebuild the accountant from the ledger: every segment that ran in ``rounds`` rounds, on ``q``
        records (a resumed run, or agents that report fewer records than declared)."""
        acc = self.accountant
        config = acc.config
        if config.population_size != q:
            if not isinstance(acc, AmplifiedAccountant):
                raise ValueError(f"{type(self).__name__}: the agents sample from {q} records, not the "
                                 f"accountant's population_size={config.population_size}; declare "
                                 f"local_dataset_size={q}")
            from dataclasses import replace

            config = replace(config, population_size=int(q))
        fresh = type(acc)(config, method=acc.method) if isinstance(acc, AmplifiedAccountant) else type(acc)(config)
        parts = [(self._mech(s, q), s["rounds"]) for s in self.past]
        parts.append((self.mechanism(q), int(rounds) - self.rounds_before))
        for mech, n in parts:
            if n > 0:
                self._compose(fresh, mech, int(n))
        if config is acc.config:
            acc.load_state_dict(fresh.state_dict())
        else:
            self.accountant = fresh
        self._composed_through = int(rounds)


class DMSGDServer(DOADPServer):
    """Decentralized momentum SGD, eq. (2) of Huo et al.: DO-ADP with p = 1, k = d, no clipping and
    no noise. The method is NOT private; it is the only way to run DO-ADP's network without DP.

    Parameters
    ----------
    initial_arrays, num_partitions, num_rounds, dataset_size, alpha, batch_size
        As :class:`DOADPServer` (paper: alpha 0.01; b = 32).
    config : DMSGDConfig (default: DMSGDConfig())
        gamma, beta, eval_every, msg_dtype.
    **kwargs
        :class:`~flwr_strategies.doadp.peer.PublicTableCore` graph arguments.
    """

    private = False
    federated_evaluation_allowed = True  # nothing private to protect

    def __init__(self, initial_arrays, *, num_partitions: int, num_rounds: int, dataset_size: int,
                 alpha: float = 0.01, batch_size: int = 32, config: DMSGDConfig | None = None, **kwargs: Any) -> None:
        self.dmsgd = config if config is not None else DMSGDConfig()
        proxy = DOADPConfig(p=1.0, k_frac=1.0, gamma=self.dmsgd.gamma, beta=self.dmsgd.beta, public_copy="x0",
                            eval_every=self.dmsgd.eval_every, msg_dtype=self.dmsgd.msg_dtype, sigma=1.0)
        super().__init__(initial_arrays, num_partitions=num_partitions, num_rounds=num_rounds,
                         dataset_size=dataset_size, alpha=alpha, batch_size=batch_size, config=proxy, **kwargs)

    def _calibrate(self) -> float:
        self.planned_epsilon = math.inf
        return 0.0

    def _auto_alpha(self) -> None:
        raise ValueError("D-mSGD adds no noise, so no noise rule sets its step size: give alpha (lr) a number")

    def params_config(self, server_round: int = 1) -> dict[str, Any]:
        cfg = super().params_config(server_round)
        cfg.update({"doadp_private": 0, "doadp_sigma": 0.0, "doadp_clip": -1.0})
        return cfg

    def guarantee(self, rounds: int) -> dict[str, float]:
        return {}

    def privacy_report(self) -> dict[str, Any]:
        return {"method": "dmsgd", "private": False, "note": "non-private: no clipping, no noise, dense messages"}
