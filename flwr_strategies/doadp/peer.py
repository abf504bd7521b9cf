"""The decentralized core of the methods whose server holds only public tables (DO-ADP, D-mSGD,
DPDO, DP-DDA, CPGT), on :class:`~flwr_strategies.decentralized.server.DecentralizedCore`.

The server emulates the peer network: it holds the graph, the mixing matrix W and the *public*
tables (what every agent broadcasts), relays to each agent what its neighbours sent, and never
holds a client's private model or randomness. Every agent takes part in every round; an agent that
fails or whose reply is rejected skips the round, as an inactive agent does (Huo et al.,
Algorithm 1, lines 14-15: its neighbours keep its public copy), and is counted in ``failures``. An
agent whose node is no longer connected is left out of the mixing (``failure_policy``).

:class:`PublicTableCore` adds what the five share to the decentralized core:

- the graph must be fixed and undirected with a doubly stochastic W (Huo et al., Assumption 1):
  every neighbour keeps the public copy of agent j (Algorithm 1, line 15); the default is the
  paper's circulant graph with neighbourhoods of 7 (``i +- 1, 2, 3``, Sec. V);
- the planned number of rounds T (privacy calibration covers T rounds; more are refused);
- the initial model x0 sent to each agent until it has answered once; x0 is also the global model
  before round 1;
- the record counts the agents sample from: each reply's ``num_examples`` is checked against the
  declared ``dataset_size`` q. A smaller count is what ran, so it replaces q in every reported
  epsilon; when the noise calibrated for q no longer certifies the target over the planned rounds,
  the run stops with :class:`DatasetSizeError` before the round is applied;
- evaluation after round 0, every ``eval_every`` rounds and always after the last round. No
  federated evaluation (:attr:`PublicTableCore.federated_evaluation_allowed` is False): an agent
  scoring the model on its training records would release their loss outside the accounted
  mechanism. With ``evaluate_private`` (simulation only, outside the privacy guarantee) the server
  asks the agents for their private models in evaluation rounds (config ``report_model = 1``); an
  agent sends it only if it consents (its node config), and the server scores the average of the
  models it received.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core.messages import Reply, ReplySpec
from ..core.server import EvalFn
from ..core.validation import ReplyError, check_integer, check_number
from ..decentralized.server import DecentralizedCore
from ..privacy.accountant import GaussianSteps, calibrate_sigma, composed_certified_epsilon
from ..privacy.doadp_accountant import doadp_sigma

__all__ = ["PublicTableCore", "DatasetSizeError", "GaussianLedger", "REPORT_KEY"]

log = logging.getLogger(__name__)

#: config key of the request for an agent's private model (``evaluate_private``); the agent answers
#: only if its own node config consents
REPORT_KEY = "report_model"


class DatasetSizeError(ValueError):
    """The agents sample from fewer records than declared, and the noise no longer certifies the target."""


class PublicTableCore(DecentralizedCore):
    """Base of the public-table cores (see the module docstring).

    Parameters
    ----------
    initial_arrays : list[np.ndarray]
        Initial model x0 (floating-point arrays only), shared by every agent.
    num_partitions : int
        Number of agents n (partition ids 0..n-1), >= 2.
    num_rounds : int
        Planned rounds T (one round = one iteration of the algorithm), >= 1.
    dataset_size : int
        q, the smallest local dataset of an agent (records), >= batch_size. Checked against the
        ``num_examples`` the agents report (see the module docstring).
    alpha : float | str (default: 0.01)
        Step size, > 0 and finite; ``"auto"``: the method derives it from its noise once calibrated
        (:func:`flwr_strategies.doadp.config.auto_step`).
    batch_size : int (default: 32)
        Records per step, in [1, q].
    config : dataclass (default: ``config_cls()``)
        The method's settings. Its ``eval_every`` is the central evaluation period (>= 1; round 0 and
        the last round are always evaluated); its ``evaluate_private`` asks for the agents' private
        models in evaluation rounds (simulation only; outside the guarantee; each agent must consent).
    graph, topology, seed, on_train_config, fraction_train, min_train
        As :class:`~flwr_strategies.decentralized.server.DecentralizedCore` (default graph: the
        paper's circulant with ``neighbours=7``). The graph must be fixed and undirected.
    """

    #: True for the private methods (D-mSGD is not)
    private = True
    #: arrays of one agent's message in a reply
    message_arrays = 1
    federated_evaluation_allowed = False
    graph_defaults = {"topology": "circulant", "neighbours": 7, "client_eval_every": 0}
    #: the method's config dataclass (its defaults when no config is given)
    config_cls: type

    def __init__(
        self,
        initial_arrays: Sequence[np.ndarray],
        *,
        num_partitions: int,
        num_rounds: int,
        dataset_size: int,
        alpha: float = 0.01,
        batch_size: int = 32,
        config: Any = None,
        **kwargs: Any,
    ) -> None:
        self.config = config if config is not None else self.config_cls()
        super().__init__(initial_arrays, num_partitions=num_partitions, **kwargs)
        name = type(self).__name__
        bad = [j for j, a in enumerate(self.initial_arrays) if a.dtype.kind != "f"]
        if bad:
            raise ValueError(
                f"{name} needs floating-point parameters only (no integer buffers such as BatchNorm's "
                f"counters); arrays {bad} are {[str(self.initial_arrays[j].dtype) for j in bad]}"
            )
        self.num_rounds = check_integer("num_rounds", num_rounds, 1)
        self.eval_every = check_integer("eval_every", self.config.eval_every, 1)
        if alpha != "auto":
            check_number("alpha", alpha, "positive and finite or 'auto'", lambda v: v > 0)
        self.batch_size = check_integer("batch_size", batch_size, 1)
        self.q = check_integer("dataset_size", dataset_size, 1)
        if self.batch_size > self.q:
            raise ValueError(f"batch_size={self.batch_size} exceeds the local dataset size q={self.q}")
        self.alpha = None if alpha == "auto" else float(alpha)  # "auto": the subclass's rule sets it
        self.evaluate_private = bool(self.config.evaluate_private)
        self._check_graph()
        self.n = int(self.num_partitions)
        self.x0 = self.layout.flatten(self.initial_arrays, dtype=np.float64)
        self.d = int(self.x0.size)
        self.q_ran = self.q  # the smallest record count that ran (declared, or smaller when reported)
        self.started = np.zeros(self.n, dtype=bool)
        self.private_models = np.zeros((self.n, self.d)) if self.evaluate_private else None
        self.reported = np.zeros(self.n, dtype=bool)  # reported a private model in the last evaluation round
        self._round_W: tuple[int, Any] = (-1, None)  # the round's W over the agents taking part

    def _check_graph(self) -> None:
        g, name = self.graph, type(self).__name__
        if self.topology.time_varying:
            raise ValueError(f"{name}: topology {self.topology.name!r} is redrawn every round, but every agent "
                             "keeps its neighbours' public copies (Huo et al., Algorithm 1): use a fixed graph")
        A = self.topology.graph(0)
        if (abs(A - A.T)).nnz:
            raise ValueError(f"{name}: the peer graph must be undirected (the public copies live on edges); "
                             f"topology {self.topology.name!r} is directed")
        if g.allow_row_stochastic or g.allow_disconnected:
            raise ValueError(f"{name} needs a connected graph with a doubly stochastic W (Huo et al., Assumption 1); "
                             f"got allow_row_stochastic={g.allow_row_stochastic}, "
                             f"allow_disconnected={g.allow_disconnected}")
        if g.client_eval_every:
            raise ValueError(f"{name}: the server holds no agent's private model, so it cannot score them; got "
                             f"client_eval_every={g.client_eval_every} (use evaluate_private in simulations)")

    @property
    def W(self) -> sp.csr_matrix:
        """The fixed mixing matrix."""
        return self.mixing_matrix(1)

    # ------------------------------------------------------------------ layout
    def unflatten(self, vec: np.ndarray) -> list[np.ndarray]:
        """Arrays of the initial layout (and dtypes) from a flat vector."""
        return self.layout.unflatten(np.asarray(vec))

    # ------------------------------------------------------------------ rounds
    def check_round(self, server_round: int) -> None:
        if server_round > self.num_rounds:
            raise ValueError(
                f"{type(self).__name__} was planned (and its noise calibrated) for num_rounds={self.num_rounds}; "
                f"round {server_round} is beyond it"
            )

    def mixing_of(self, server_round: int, partition_ids: Sequence[int] | None = None) -> sp.csr_matrix:
        """The round's W over the agents taking part: with ``partition_ids`` (``configure_train``) it is
        built (an agent whose node is gone is left out by ``failure_policy``; W itself when every agent
        is there) and kept for the round; without, the kept one (W when none was built this round)."""
        if partition_ids is not None:
            self._round_W = (int(server_round), self.live_mixing(1, self.alive_mask(partition_ids)))
        return self._round_W[1] if self._round_W[0] == int(server_round) else self.W

    def p2p_links(self, server_round: int, pids) -> int:
        """Links the broadcasts of ``pids`` travel this round."""
        degrees = np.diff(self.mixing_of(server_round).indptr) - 1
        return int(sum(int(degrees[p]) for p in pids))

    def should_evaluate(self, server_round: int) -> bool:
        return server_round == 0 or server_round % self.eval_every == 0 or server_round == self.num_rounds

    def report_round(self, server_round: int) -> bool:
        """True when the agents are asked for their private models this round (``evaluate_private``)."""
        return self.evaluate_private and self.should_evaluate(server_round)

    def round_config(self, server_round: int) -> dict[str, Any]:
        """The standard config without ``seed`` (a client's randomness never comes from the server)."""
        cfg = self.base_config(server_round)
        cfg.pop("seed", None)
        cfg["t"] = int(server_round) - 1
        cfg[REPORT_KEY] = int(self.report_round(server_round))
        return cfg

    def start_arrays(self, pid: int) -> list[np.ndarray]:
        """``[x0]`` for an agent that has not answered yet (it initialises from it), else ``[]``."""
        return [] if self.started[pid] else [self.x0]

    # ------------------------------------------------------------------ replies
    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        return ReplySpec(None)  # each method's own message (active / inactive / with private model): check_reply

    def split_report(self, server_round: int, reply: Reply) -> tuple[list[np.ndarray], np.ndarray | None]:
        """``(message arrays, private model or None)``. In a report round an agent that consents sends
        its private model after its message (:attr:`message_arrays` arrays); its shape is checked."""
        arrays = list(reply.arrays)
        if not self.report_round(server_round) or len(arrays) - 1 != self.message_arrays:
            return arrays, None
        x = arrays[-1]
        if x.dtype.kind != "f" or x.shape != (self.d,):
            raise ReplyError(
                f"partition {reply.partition_id}: private model must be a float vector of length {self.d}, "
                f"got {x.dtype} {x.shape}"
            )
        return arrays[:-1], x

    def dataset_size_of(self, server_round: int, replies: list[Reply]) -> int:
        """The record count to account with after this round's replies: the smallest of q and the
        ``num_examples`` the agents report (the larger ones leave the conservative q). Raises
        :class:`DatasetSizeError` when that count no longer certifies the target over the planned
        rounds (nothing is changed)."""
        if not self.private or not replies:
            return self.q_ran
        low = min(replies, key=lambda r: r.num_examples)
        q = int(low.num_examples)
        if q >= self.q_ran:
            return self.q_ran
        name = type(self).__name__
        if q < self.batch_size:
            raise DatasetSizeError(f"{name}: partition {low.partition_id} samples from {q} records (num-examples), "
                                   f"fewer than batch_size={self.batch_size}")
        planned, target = self.epsilon_at(self.num_rounds, q), self.target_epsilon()
        spent = self.epsilon_at(int(server_round), q)
        if planned > target * (1 + 1e-9):
            raise DatasetSizeError(
                f"{name}: partition {low.partition_id} samples from {q} records (num-examples), not the declared "
                f"local_dataset_size={self.q}; the noise calibrated for {self.q} gives epsilon={planned:.4g} over "
                f"{self.num_rounds} rounds, above the target epsilon={target:g}. Spent so far, with this round: "
                f"epsilon={spent:.4g}. Declare local_dataset_size={q} (the smallest partition)"
            )
        log.warning("%s: partition %s samples from %s records, not the declared %s; epsilon is accounted with %s",
                    name, low.partition_id, q, self.q, q)
        return q

    def apply(self, server_round: int, replies: list[Reply], q: int) -> dict[str, Any]:
        """Fold the round's checked replies into the method's tables (its agents ran on ``q`` records,
        :meth:`dataset_size_of`); returns the method's metrics."""
        raise NotImplementedError

    def privacy_metrics(self, server_round: int) -> dict[str, Any]:
        """The epsilon the method reports after ``server_round`` (evaluation rounds)."""
        raise NotImplementedError

    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        q = self.dataset_size_of(server_round, replies)  # raises before any table changes
        metrics = self.apply(server_round, replies, q)
        self.q_ran = q
        self.commit_reports(server_round, replies)
        metrics.update(self.graph_metrics(server_round, self.mixing_of(server_round)))
        if self.private and self.should_evaluate(server_round):
            metrics.update(self.privacy_metrics(server_round), dp_dataset_size=int(self.q_ran))
        return metrics

    def commit_reports(self, server_round: int, replies: list[Reply]) -> None:
        """Mark the agents as started and store the private models of a report round (commit phase)."""
        report = self.report_round(server_round)
        if report:
            self.reported[:] = False
        for r in replies:
            self.started[r.partition_id] = True
            if report:
                _, x = self.split_report(server_round, r)
                if x is not None:
                    self.private_models[r.partition_id] = x
                    self.reported[r.partition_id] = True

    # ------------------------------------------------------------------ privacy (per method)
    def epsilon_at(self, rounds: int, q: int | None = None) -> float:
        """The epsilon the method reports after ``rounds`` rounds on ``q`` records (default: what ran)."""
        return math.inf

    def target_epsilon(self) -> float:
        """The epsilon the run's noise must certify (``config.epsilon``)."""
        return float(self.config.epsilon)

    # ------------------------------------------------------------------ evaluation
    def public_model(self) -> np.ndarray:
        """The flat public model after round 1 (the method's average of its public tables)."""
        raise NotImplementedError

    def global_arrays(self) -> list[np.ndarray]:
        """x0 before round 1, then the method's public model, in the initial layout."""
        return self.unflatten(self.x0 if self.server_round == 0 else self.public_model())

    def evaluate(self, server_round: int, evaluate_fn: EvalFn):
        res = evaluate_fn(server_round, self.model_arrays())  # x0 until a round aggregated an update
        if res is None or not self.report_round(server_round) or not self.reported.any():
            return res
        loss, metrics = res
        metrics = dict(metrics)
        X = self.private_models[self.reported]
        priv = evaluate_fn(server_round, self.unflatten(X.mean(axis=0)))
        if priv is not None:
            ploss, pmetrics = priv
            metrics["private_xbar_loss"] = float(ploss)
            for key, value in pmetrics.items():
                if isinstance(value, (int, float, np.integer, np.floating)):
                    metrics[f"private_xbar_{key}"] = float(value)
        metrics["private_consensus_distance"] = float(np.mean(np.sum((X - X.mean(0)) ** 2, axis=1)))
        metrics["private_models_reported"] = int(self.reported.sum())
        metrics["private_models_outside_guarantee"] = 1
        return loss, metrics

    # ------------------------------------------------------------------ checkpoints
    def peer_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"started": self.started.copy(), "reported": self.reported.copy(), "q_ran": int(self.q_ran)}
        if self.private_models is not None:
            out["private_models"] = self.private_models.copy()
        return out

    def table_of(self, state: dict[str, Any], key: str) -> np.ndarray:
        """The checkpoint's public table ``state[key]`` as float64, refused unless it is n x d."""
        table = np.array(state[key], dtype=np.float64)
        if table.shape != (self.n, self.d):
            raise ValueError(f"checkpoint table {key!r} has shape {table.shape}, expected {(self.n, self.d)}")
        return table

    def load_peer_state(self, state: dict[str, Any]) -> None:
        started = np.array(state["started"], dtype=bool)
        if started.shape != (self.n,):
            raise ValueError(f"checkpoint has {started.shape[0]} agents, this core {self.n}")
        self.started = started
        self.reported = np.array(state["reported"], dtype=bool)
        self.q_ran = min(self.q, int(state.get("q_ran", self.q)))
        if self.private_models is not None and "private_models" in state:
            self.private_models = np.array(state["private_models"], dtype=np.float64)


class GaussianLedger:
    """Accounting of the Gaussian-noise cores (DO-ADP, DP-DDA) over the steps that ran.

    Each run of a core is one segment of steps with one mechanism (noise std, clip, batch size,
    sampling). A checkpoint carries the segments that ran and the record count they ran on; a core
    resumed from it (even one calibrated differently) composes them with its own steps, so the
    reported epsilon is the one of every step that ran. Mixin of a :class:`PublicTableCore` with
    ``sigma``, ``config.clip``, ``config.sampling``, ``config.delta`` and a per-agent step count
    (:meth:`step_counts`).
    """

    def calibrate(self, p: float, k: int, refused: str, why: str, **theorem1: Any) -> float:
        """Set and return the noise std ``sigma``: ``config.sigma`` when given, else calibrated for
        ``num_rounds`` by the accountant (``calibration="accountant"``) or by Theorem 1's chain for
        activation ``p`` and ``k`` of ``d`` coordinates (``theorem1``: further :func:`doadp_sigma`
        keywords). ``planned_epsilon`` is what the standard accountant certifies for it over
        ``num_rounds``; above the target epsilon the core is refused (the message starts with
        ``refused``, whose ``{}`` is sigma, and ends with ``why``)."""
        c, T = self.config, self.num_rounds
        if c.sigma is not None:
            self.sigma = float(c.sigma)
        elif c.calibration == "accountant":
            self.sigma = float(calibrate_sigma(c.epsilon, c.delta, T, c.clip, self.batch_size, self.q, c.sampling))
        else:
            self.sigma = float(doadp_sigma(c.epsilon, c.delta0, T, p, k, self.d, self.q, c.clip,
                                           batch_size=self.batch_size, **theorem1))
        self.planned_epsilon = self.mechanism().epsilon(T, c.delta)
        if self.planned_epsilon > c.epsilon * (1 + 1e-9):
            raise ValueError(f"{refused.format(self.sigma)} gives epsilon={self.planned_epsilon:.4g} at "
                             f"delta={c.delta:g} over {T} rounds by a standard accountant, above the target "
                             f"epsilon={c.epsilon:g}{why}")
        return self.sigma

    def init_ledger(self) -> None:
        self.past: list[dict[str, Any]] = []  # earlier segments: sigma, clip, batch_size, sampling, rounds, steps
        self.rounds_before = 0

    def mechanism(self, q: int | None = None) -> GaussianSteps:
        """The per-step mechanism every agent runs now, on ``q`` records (default: what ran)."""
        return GaussianSteps(self.sigma, self.config.clip, self.batch_size, self.q_ran if q is None else int(q),
                             self.config.sampling)

    def step_counts(self) -> np.ndarray:
        """Per-agent private steps over the whole run (cumulative, checkpointed)."""
        raise NotImplementedError

    def _segment(self) -> dict[str, Any]:
        return {"sigma": float(self.sigma), "clip": float(self.config.clip), "batch_size": int(self.batch_size),
                "sampling": str(self.config.sampling)}

    def _mech(self, seg: dict[str, Any], q: int) -> GaussianSteps:
        return GaussianSteps(seg["sigma"], seg["clip"], seg["batch_size"], q, seg["sampling"])

    def epsilon_at(self, rounds: int, q: int | None = None) -> float:
        """Certified epsilon at ``delta`` after ``rounds`` rounds in all (earlier segments, then this
        core's), every agent stepping every round (activation is not credited)."""
        q = self.q_ran if q is None else int(q)
        parts = [(self._mech(s, q), s["rounds"]) for s in self.past]
        parts.append((self.mechanism(q), int(rounds) - self.rounds_before))
        return composed_certified_epsilon(parts, self.config.delta)

    def observed_epsilon(self) -> float:
        """Certified epsilon of the agent with the most private steps that ran (exact per agent)."""
        current = self.step_counts() - sum((np.asarray(s["steps"], dtype=np.int64) for s in self.past),
                                           np.zeros(self.n, dtype=np.int64))
        if not self.past:  # one mechanism: epsilon grows with the steps, so the busiest agent's
            return composed_certified_epsilon([(self.mechanism(), int(current.max()))], self.config.delta)
        counts = np.column_stack([np.asarray(s["steps"], dtype=np.int64) for s in self.past] + [current])
        mechs = [self._mech(s, self.q_ran) for s in self.past] + [self.mechanism()]
        return max(composed_certified_epsilon(list(zip(mechs, row)), self.config.delta)
                   for row in {tuple(int(c) for c in r) for r in counts})

    def ledger_state(self) -> dict[str, Any]:
        """The earlier segments, and this core's mechanism with the round it started at (checkpointed;
        its round count follows from the checkpoint's round)."""
        return {"segments": [dict(s) for s in self.past], "current": {**self._segment(), "start": self.rounds_before}}

    def load_state_dict(self, state: dict[str, Any], *, num_rounds: int | None = None) -> None:
        self._checkpoint_round = state.get("server_round") if isinstance(state, dict) else None  # checked below
        super().load_state_dict(state, num_rounds=num_rounds)

    def load_ledger(self, state: dict[str, Any]) -> None:
        """Continue the checkpoint's accounting: its segments, plus the segment it was running,
        which this core continues when it runs the same mechanism."""
        segments, current = [dict(s) for s in state["segments"]], dict(state["current"])
        for s in segments + [current]:
            if s["sampling"] != self.config.sampling:
                raise ValueError(
                    f"checkpoint's steps sampled batches by {s['sampling']!r}, this core by "
                    f"{self.config.sampling!r}: one accountant cannot compose both; resume with "
                    f"sampling={s['sampling']!r}")
        for s in segments:
            if len(s["steps"]) != self.n:
                raise ValueError(f"checkpoint's ledger has {len(s['steps'])} agents, this core {self.n}")
        start = int(current.pop("start"))
        if all(current[k] == v for k, v in self._segment().items()):
            self.past, self.rounds_before = segments, start
            return
        previous = sum((np.asarray(s["steps"], dtype=np.int64) for s in segments), np.zeros(self.n, dtype=np.int64))
        ran = start if getattr(self, "_checkpoint_round", None) is None else int(self._checkpoint_round)
        current.update(rounds=ran - start, steps=(self.step_counts() - previous).tolist())
        self.past, self.rounds_before = segments + [current], ran
