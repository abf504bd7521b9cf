"""The framework-neutral server side of a method: NumPy in, NumPy out, no Flower types.

A method subclasses :class:`ServerCore` and implements three things:

- :meth:`ServerCore.configure_train`: the :class:`~flwr_strategies.core.messages.Instruction` for
  each selected partition (the same model for all, or one per client);
- :meth:`ServerCore.aggregate_train`: fold the validated replies into the state, atomically;
- :meth:`ServerCore.global_arrays`: the model to evaluate and to return, in the initial layout.

and, where it keeps more than the global model, :meth:`ServerCore.extra_state` /
:meth:`ServerCore.load_extra_state` so that :meth:`ServerCore.state_dict` checkpoints a run.

Everything else is shared: seeded sampling by partition id (:meth:`ServerCore.select`), reply
validation before any state changes (:meth:`ServerCore.train_round`, via
:func:`~flwr_strategies.core.validation.screen`), and the round counter. The two Flower
adapters (:mod:`flwr_strategies.adapters.legacy`, :mod:`flwr_strategies.adapters.message`) drive
a core through exactly these calls, so both APIs give the same numbers.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .messages import ArraySpec, Instruction, Reply, ReplySpec
from .state import check_state_layout, load_state, state_layout
from .validation import (
    Rejection,
    ReplyError,
    all_finite,
    cap_num_examples,
    check_integer,
    check_max_num_examples,
    check_number,
    check_policy,
    is_int,
    nonfinite_problem,
    nonfinite_replies,
    screen,
)

__all__ = ["ServerCore", "RoundResult", "EvalFn", "ConfigFn", "ExternalModelError", "check_model_arrays"]

_LOG = logging.getLogger(__name__)

#: ``(server_round, arrays) -> (loss, metrics) | None``: central evaluation of a model.
EvalFn = Callable[[int, list[np.ndarray]], "tuple[float, dict[str, Any]] | None"]
#: ``server_round -> dict``: the standard per-round client config (lr, epochs, seed...).
ConfigFn = Callable[[int], dict[str, Any]]


class ExternalModelError(RuntimeError):
    """The global model was changed outside the strategy and the method cannot take it."""


class RoundResult(dict):
    """Metrics of one finished training round (a dict) plus the rejections it saw and the replies
    whose ``num_examples`` it clipped (``(partition, reported, bound)``)."""

    rejections: list[Rejection]
    clipped: list[tuple[int, int, int]]


def _check_arrays(arrays: Sequence[np.ndarray], what: str) -> list[np.ndarray]:
    """``arrays`` as a list after checking it is not empty and every array is finite."""
    out = [np.asarray(a) for a in arrays]
    if not out:
        raise ValueError(f"{what} is empty: pass the model's arrays")
    problem = nonfinite_problem(out)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")
    return out


def check_model_arrays(arrays: Sequence[np.ndarray], like: Sequence[np.ndarray], what: str) -> list[np.ndarray]:
    """``arrays`` as a list after checking they match ``like`` (count, shapes, dtypes) and are finite."""
    out = [np.asarray(a) for a in arrays]
    if len(out) != len(like):
        raise ValueError(f"{what} has {len(out)} arrays, the model has {len(like)}")
    for j, (a, b) in enumerate(zip(out, like)):
        if a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype:
            raise ValueError(f"{what}: array {j} is {a.dtype} {a.shape}, the model's is {np.asarray(b).dtype} {np.shape(b)}")
    return _check_arrays(out, what)


class ServerCore(ABC):
    """Base class of every method's server core.

    Parameters
    ----------
    initial_arrays : Sequence[np.ndarray]
        The initial global model, every array in ``state_dict`` order. Must be non-empty and finite.
    num_partitions : int | None (default: None)
        Number of clients (partition ids ``0..num_partitions-1``). None accepts any non-negative id
        (centralized methods that do not keep per-client state).
    fraction_train : float (default: 1.0)
        Fraction of the available clients sampled per round, in (0, 1].
    min_train : int (default: 1)
        Minimum number of clients sampled per round, >= 1.
    seed : int (default: 0)
        Seed of the sampling generator (and of any server-side randomness of the method), >= 0.
    on_train_config : callable | None (default: None)
        ``server_round -> dict`` of standard client settings (lr, local epochs, batch size, seed).
        Its output is the base of every instruction's config; the core adds its own keys.
    """

    #: True when every client trains every round (decentralized methods): no sampling draw.
    full_participation: bool = False
    #: True when a NaN or an infinity in any valid reply makes what :meth:`aggregate_train` checks
    #: before committing (:func:`~flwr_strategies.core.validation.require_finite`) non-finite too,
    #: e.g. a weighted sum of the replies with positive weights. :meth:`train_round` then reads
    #: every reply's values once, in the aggregate, instead of once more to check them first: when
    #: the aggregate fails, it checks each reply, rejects those that are not finite (the same
    #: rejections, in the same order, as checking first) and aggregates the others again. An
    #: aggregate that fails with every reply finite rejects the round, as always.
    aggregate_reveals_nonfinite: bool = False

    def __init__(
        self,
        initial_arrays: Sequence[np.ndarray],
        *,
        num_partitions: int | None = None,
        fraction_train: float = 1.0,
        min_train: int = 1,
        seed: int = 0,
        on_train_config: ConfigFn | None = None,
    ) -> None:
        self.initial_arrays = _check_arrays(initial_arrays, "initial_arrays")
        self.num_partitions = None if num_partitions is None else check_integer("num_partitions", num_partitions, 1)
        self.fraction_train = check_number("fraction_train", fraction_train, "in (0, 1]", lambda v: 0.0 < v <= 1.0)
        self.min_train = check_integer("min_train", min_train, 1)
        self.seed = check_integer("seed", seed, 0)
        self.on_train_config = on_train_config
        self.model_spec = tuple(ArraySpec.like(a) for a in self.initial_arrays)
        self.server_round = 0  # last completed training round
        #: whether a round has aggregated a client update since the start (or the checkpoint)
        self.updated = False
        self._rng = np.random.default_rng(self.seed)
        self._state_layout: Any = None  # extra_state()'s layout, taken when a checkpoint is first loaded

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_partitions={self.num_partitions}, fraction_train={self.fraction_train})"

    # ------------------------------------------------------------------ participation
    def num_to_sample(self, num_available: int) -> int:
        """Clients sampled when ``num_available`` are connected (Flower's FedAvg rule:
        ``max(int(num_available * fraction_train), min_train)``)."""
        return max(int(num_available * self.fraction_train), self.min_train)

    def select(self, server_round: int, available: Iterable[int]) -> list[int]:
        """Partition ids that train in ``server_round``, ascending.

        Draws from the core's own seeded generator over the available ids in ascending order, so
        the same seed picks the same clients on every backend and through both Flower APIs.
        """
        avail = sorted({int(p) for p in available})
        if self.num_partitions is not None:
            outside = [p for p in avail if not 0 <= p < self.num_partitions]
            if outside:
                raise ValueError(f"partition ids {outside} are outside 0..{self.num_partitions - 1}")
        if self.full_participation:
            return avail
        k = self.num_to_sample(len(avail))
        if k > len(avail):
            raise ValueError(f"round {server_round}: cannot sample {k} clients (the minimum of training clients is "
                             f"{self.min_train}: min_fit_clients / min_train_nodes): only {len(avail)} are connected")
        chosen = np.sort(self._rng.choice(len(avail), size=k, replace=False))
        return [avail[int(i)] for i in chosen]

    def base_config(self, server_round: int) -> dict[str, Any]:
        """The round's standard client config (``on_train_config``), always with ``server-round``
        (Flower's key for the round number)."""
        cfg = dict(self.on_train_config(server_round)) if self.on_train_config is not None else {}
        cfg["server-round"] = int(server_round)
        return cfg

    # ------------------------------------------------------------------ the method
    @abstractmethod
    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        """One instruction per selected partition (``partition_ids`` is ascending)."""

    def instructions_sent(self, server_round: int) -> None:
        """Called once every instruction of ``server_round`` has been handed over (serialized into
        Flower's messages, or copied for in-process clients): a core may release buffers the
        instructions' arrays were views of, so they are not held while the replies are in flight.
        Default: nothing."""

    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        """What a valid reply from ``partition_id`` looks like (default: the model's layout)."""
        return ReplySpec(self.model_spec)

    def check_reply(self, server_round: int, reply: Reply) -> None:
        """Method-specific checks beyond :meth:`reply_spec`; raise ``ReplyError`` to reject."""

    @abstractmethod
    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        """Fold the validated ``replies`` (sorted by partition id) into the state and return the
        round's metrics. ``failed`` lists the sampled partitions that did not reply validly.

        Must be atomic: compute everything first, then commit, so an exception leaves the state
        as it was."""

    @abstractmethod
    def global_arrays(self) -> list[np.ndarray]:
        """The current global model in the layout of ``initial_arrays``."""

    def model_arrays(self) -> list[np.ndarray]:
        """The global model a run reports (evaluates, returns to Flower): ``initial_arrays`` until a
        round has aggregated a client update, :meth:`global_arrays` from then on.

        A method whose starting state is not the model it was given (FedLMT's factors ``W = U V``,
        FedMUD's redrawn ``W_base``) thereby never replaces the user's model in a round in which no
        client succeeded: a round without a successful client never changes the global model.
        """
        return [np.array(a, copy=True) for a in self.initial_arrays] if not self.updated else self.global_arrays()

    def adopt_global_arrays(self, arrays: list[np.ndarray]) -> None:
        """Make ``arrays`` (in the layout of :meth:`global_arrays`) the global model of the next round.

        Called by the adapters when the model Flower passes back differs from the one the core
        returned, i.e. a strategy wrapper (Flower's differential-privacy wrappers, a user's own)
        changed it. The default refuses with :class:`ExternalModelError`: a method whose state is
        more than one global model (one model per peer, low-rank factors) cannot take a model
        changed from outside. Methods whose state is the global model override this.
        """
        raise ExternalModelError(
            f"{type(self).__name__} cannot take a global model changed outside the strategy: "
            f"{self.external_model_note}"
        )

    #: Why :meth:`adopt_global_arrays` refuses (shown in the error); methods that adopt ignore it.
    external_model_note = ("its state is more than the global model it reports, so a changed model cannot become "
                           "what the clients receive")

    def should_evaluate(self, server_round: int) -> bool:
        """Whether central evaluation runs after ``server_round`` (0 = the initial model)."""
        return True

    def round_not_aggregated(self, server_round: int) -> None:
        """Called for a round in which no client update was aggregated (every sampled client failed
        or was rejected), instead of :meth:`aggregate_train`. The model state must not change; a
        private method still accounts the round, whose instructions went out. Default: nothing."""

    def evaluate(self, server_round: int, evaluate_fn: EvalFn) -> tuple[float, dict[str, Any]] | None:
        """Central evaluation of the global model (:meth:`model_arrays`; subclasses add per-client metrics)."""
        return evaluate_fn(server_round, self.model_arrays())

    # ------------------------------------------------------------------ one round, checked
    def train_round(
        self,
        server_round: int,
        replies: Iterable[Reply],
        *,
        sampled: Iterable[int],
        failed: Iterable[int] = (),
        on_bad_reply: str = "drop",
        max_num_examples: int | Mapping[int, int] | None = None,
    ) -> RoundResult:
        """Validate ``replies`` (before any state changes), aggregate the valid ones, count.

        A rejected reply counts as a failed client (policy ``"drop"``) or raises
        :class:`~flwr_strategies.core.validation.ReplyError` with nothing changed (``"raise"``).
        A round with no valid reply (every sampled client failed or was rejected) does not call
        :meth:`aggregate_train`: the state, and so the global model, stays as it was.

        A core checks what it computed before it commits it
        (:func:`~flwr_strategies.core.validation.require_finite`). When the aggregate of valid
        replies is not finite (a ``FloatingPointError``, such as
        :class:`~flwr_strategies.core.validation.NonFiniteResult`, from :meth:`aggregate_train`),
        the whole round is rejected: the state stays as it was, every valid reply is counted as
        rejected and the round's ``round_rejected`` metric is 1 (``"raise"``: ``ReplyError``).
        After a commit, the global model is checked once more; a core that committed a non-finite
        model raises ``RuntimeError`` (the run must stop: its state can no longer be trusted).

        ``max_num_examples`` (None, an integer or ``{partition_id: bound}``, see
        :func:`~flwr_strategies.core.validation.check_max_num_examples`) bounds each valid reply's
        ``num_examples`` before the core sees it: a count above its bound is aggregated as the
        bound, logged, and counted in the round's ``num_examples_clipped`` metric (present whenever
        a bound is set); a reply from a partition a mapping does not name is rejected.

        Returns the core's metrics plus ``failures``, ``rejected``, ``round_rejected`` and the
        lists ``sampled_partitions`` and ``failed_partitions`` (every sampled partition whose reply
        was not aggregated: failed, rejected, or part of a rejected round).
        """
        check_policy(on_bad_reply)
        max_num_examples = check_max_num_examples(max_num_examples)
        sampled = sorted({int(p) for p in sampled})
        defer = bool(self.aggregate_reveals_nonfinite)
        valid, rejected = screen(self, server_round, list(replies), sampled=sampled, on_bad_reply=on_bad_reply,
                                 finite=not defer)
        valid, unbounded, clipped = cap_num_examples(valid, max_num_examples)
        if unbounded:
            if on_bad_reply == "raise":
                raise ReplyError(f"{type(self).__name__} round {server_round}: {unbounded[0][1]}")
            rejected = sorted(rejected + unbounded, key=lambda item: item[0])
        for pid, reported, bound in clipped:
            _LOG.warning("%s round %s: partition %s reported num_examples=%s, above max_num_examples=%s: "
                         "weighted as %s", type(self).__name__, server_round, pid, reported, bound, bound)
        round_rejected = 0
        while True:
            ok = {r.partition_id for _, r in valid}
            failed_ids = sorted(set(int(p) for p in failed) | (set(sampled) - ok))
            if not valid:  # no client succeeded: nothing to fold in, the state stays as it was
                metrics = {}
                self.round_not_aggregated(int(server_round))
                break
            try:
                # deferred: a reply's NaN may pass through the aggregate first (it is then found and
                # rejected below), so NumPy's warnings about it would only be noise
                with np.errstate(all="ignore") if defer else contextlib.nullcontext():
                    metrics = dict(self.aggregate_train(server_round, [r for _, r in valid], failed_ids))
            except Exception as err:
                bad = nonfinite_replies(valid) if defer else []
                if bad:  # the replies that a check before aggregating would have rejected
                    if on_bad_reply == "raise":
                        raise ReplyError(f"{type(self).__name__} round {server_round}: {bad[0][1]}") from None
                    self._check_committed(server_round, "after a failed aggregation in round")
                    dropped = {pos for pos, _ in bad}
                    valid = [item for item in valid if item[0] not in dropped]
                    rejected = sorted(rejected + bad, key=lambda item: item[0])
                    defer = False
                    continue
                if not isinstance(err, FloatingPointError):
                    raise
                reason = f"the round's aggregate is not finite ({err}); round {server_round} rejected, state kept"
                if on_bad_reply == "raise":
                    raise ReplyError(f"{type(self).__name__} round {server_round}: {reason}") from err
                self._check_committed(server_round, "after rejecting the round")
                rejected = rejected + [(-1, Rejection(r.partition_id, reason)) for _, r in valid]
                failed_ids = sorted(set(failed_ids) | ok)
                metrics, round_rejected = {}, 1
            else:
                self._check_committed(server_round, "after the round")
            break
        rejected = [r for _, r in rejected]
        self.server_round = int(server_round)
        self.updated = self.updated or bool(valid and not round_rejected)
        metrics["failures"] = len(failed_ids)
        metrics["rejected"] = len(rejected)
        metrics["round_rejected"] = round_rejected
        if max_num_examples is not None:
            metrics["num_examples_clipped"] = len(clipped)
        # who was asked and who did not contribute: the run's status is computed from these
        metrics["sampled_partitions"] = list(sampled)
        metrics["failed_partitions"] = failed_ids
        out = RoundResult(metrics)
        out.rejections = rejected
        out.clipped = clipped
        return out

    def _check_committed(self, server_round: int, when: str) -> None:
        """Raise ``RuntimeError`` when the committed global model is not finite."""
        problem = next((j for j, a in enumerate(self.global_arrays()) if not all_finite(a)), None)
        if problem is not None:
            raise RuntimeError(
                f"{type(self).__name__} holds a non-finite global model (array {problem}) {when} {server_round}: the "
                "core committed a result it had not checked, so the run cannot go on"
            )

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """Method state beyond the round counter and the sampling generator (arrays, scalars)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the run after the last completed round (a deep copy).

        Values are NumPy arrays, Python scalars, strings and nested dicts/lists of them;
        :func:`flwr_strategies.core.state.save_state` writes it to disk without pickle.
        """
        return copy.deepcopy(
            {
                "core": type(self).__name__,
                "server_round": int(self.server_round),
                "sampler": self._rng.bit_generator.state,
                "method": self.extra_state(),
            }
        )

    def load_state_dict(self, state: dict[str, Any], *, num_rounds: int | None = None) -> None:
        """Restore a :meth:`state_dict` (from a core of the same class and configuration).

        The checkpoint is validated like a reply before anything changes: it must name this core's
        class; its round must be an integer in ``0..num_rounds`` (``num_rounds``: the run it resumes,
        when the caller knows it; the core's own horizon otherwise, where it has one); its
        sampler state must be this core's bit generator; and its method state must have the layout
        of this core's own (:meth:`extra_state` when a checkpoint is first loaded: load into a
        freshly built core, as every resume does): the same keys, the same number of
        arrays, every array with this core's shape and exact dtype, every number finite. Lists
        that start empty (logs that grow during a run) may have any length; keys this core adds
        later in a run (optimizer moments) may be present. A bad checkpoint raises ``ValueError``
        naming the entry and the value, with the core unchanged.
        """
        name = type(self).__name__
        if not isinstance(state, dict):
            raise ValueError(f"a checkpoint is a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in ("core", "server_round", "sampler", "method") if k not in state]
        if missing:
            raise ValueError(f"checkpoint lacks {', '.join(repr(k) for k in missing)} (not a {name}.state_dict())")
        if state["core"] != name:
            raise ValueError(f"checkpoint is from {state['core']!r}, not {name}")
        rnd = state["server_round"]
        horizon = num_rounds if num_rounds is not None else self.horizon()
        if not is_int(rnd) or rnd < 0 or (horizon is not None and rnd > horizon):
            upper = f"..{int(horizon)}" if horizon is not None else " or more"
            raise ValueError(f"checkpoint server_round = {rnd!r}: must be an integer in 0{upper}")
        sampler = state["sampler"]
        own_sampler = self._rng.bit_generator.state
        if not isinstance(sampler, dict) or sampler.get("bit_generator") != own_sampler["bit_generator"] or set(
                sampler) != set(own_sampler):
            raise ValueError(f"checkpoint sampler state is not a {own_sampler['bit_generator']} state: {sampler!r:.200}")
        if self._state_layout is None:
            self._state_layout = state_layout(self.extra_state())
        check_state_layout(state["method"], self._state_layout, where="method")
        before, was_updated = self.state_dict(), self.updated
        state = copy.deepcopy(state)
        try:
            self.load_extra_state(state["method"])
            self._rng.bit_generator.state = state["sampler"]
            self.server_round = int(rnd)
            self.updated = self.server_round > 0
            problem = next((j for j, a in enumerate(self.global_arrays()) if not all_finite(a)), None)
            if problem is not None:
                raise ValueError(f"its global model array {problem} is not finite")
        except (KeyError, TypeError, ValueError, IndexError) as err:
            self.load_extra_state(copy.deepcopy(before["method"]))
            self._rng.bit_generator.state = before["sampler"]
            self.server_round = before["server_round"]
            self.updated = was_updated
            what = f"missing entry {err}" if isinstance(err, KeyError) else str(err)
            raise ValueError(f"checkpoint does not fit this {name}: {what}") from None

    def load_checkpoint(self, path: str | Path, *, num_rounds: int | None = None) -> None:
        """Resume from a checkpoint file (``save_state(path, core.state_dict())``): read it with
        :func:`~flwr_strategies.core.state.load_state` (bounded by the file's size) and restore it
        with :meth:`load_state_dict` (``num_rounds``: the run it resumes, when the caller knows
        it). Every error is a ``ValueError`` (``FileNotFoundError`` for a missing file) naming
        ``path``; the core is unchanged after one."""
        state = load_state(path)
        try:
            self.load_state_dict(state, num_rounds=num_rounds)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def horizon(self) -> int | None:
        """The last round this core can run, when it knows it (None: any number of rounds)."""
        for attr in ("num_rounds", "final_round"):
            value = getattr(self, attr, None)
            if is_int(value):
                return int(value)
        return None
