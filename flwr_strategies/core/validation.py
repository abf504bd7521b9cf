"""One check for every client reply, shared by every strategy (both Flower APIs).

:func:`screen` runs before a core's ``aggregate_train`` touches any state. A reply is
rejected when its partition id is not an integer in range, was not sampled this round or comes
twice; when its arrays do not match the core's :class:`~flwr_strategies.core.messages.ReplySpec`
(count, shapes, and the exact dtype of what the server sent: a ``float16`` or ``complex64`` reply to
a ``float32`` model is rejected, never cast); when a floating array or a required metric is NaN or
infinite; when ``num_examples`` is not a non-negative integer; when the core's own
``check_reply`` objects; or when the reply's own ``train_loss`` says its local training diverged
(:func:`diverged_replies`: NaN or infinite, or more than :data:`DIVERGED_LOSS_RATIO` times the
median of the other replies' train losses).

Valid replies can still add up to something that is not finite (one reply of ``3e38`` values is
finite in ``float32``; a sum or a product of such values is not). A core therefore checks what it
computed with :func:`require_finite` before it commits anything; the
:class:`NonFiniteResult` it raises makes :meth:`~flwr_strategies.core.server.ServerCore.train_round`
reject the whole round, with the state left as it was.

The policy is the same for every strategy (``on_bad_reply``):

- ``"drop"`` (default): the reply is treated as a failed client. It is logged, counted in the
  round's ``rejected`` metric, and never aggregated; the round goes on with the valid replies.
- ``"raise"``: a :class:`ReplyError` naming the partition and the problem is raised before any
  state changes.

A reply's ``num_examples`` is the weight FedAvg-style methods give it, and the client's own claim:
``max_num_examples`` bounds it (:func:`check_max_num_examples`, :func:`cap_num_examples`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .messages import Reply, ReplySpec, dtype_group

if TYPE_CHECKING:  # pragma: no cover
    from .server import ServerCore

__all__ = [
    "ReplyError", "Rejection", "BAD_REPLY_POLICIES", "NonFiniteResult", "SettingError", "all_finite",
    "cap_num_examples", "check_choice", "check_flag", "check_integer", "check_max_num_examples", "check_number",
    "check_policy", "check_range", "check_reply",
    "is_int", "is_real", "nonfinite_problem", "nonfinite_replies", "require_finite", "screen", "diverged_replies",
]

BAD_REPLY_POLICIES = ("drop", "raise")


class ReplyError(ValueError):
    """A client reply failed validation. The message names the partition and the problem."""


class NonFiniteResult(FloatingPointError):
    """What a core computed from valid replies is NaN or infinite; nothing has been committed.

    :meth:`~flwr_strategies.core.server.ServerCore.train_round` rejects the round (as it does any
    ``FloatingPointError`` a core raises while it computes): every reply of it counts as rejected,
    and the core's state stays what it was before the round.
    """


#: elements checked at a time by :func:`all_finite` (bounds the temporary boolean buffer)
_CHUNK = 1 << 20


def all_finite(array: Any) -> bool:
    """True when every element of ``array`` is finite (non-floating arrays always are).

    Checks a contiguous array in chunks of about a million elements, so the temporary buffer stays
    small even for a table of many models.
    """
    a = np.asarray(array)
    if a.dtype.kind not in "fc" or a.size == 0:
        return True
    flat = a.reshape(-1)  # a view for contiguous arrays
    for start in range(0, flat.size, _CHUNK):
        if not np.isfinite(flat[start:start + _CHUNK]).all():
            return False
    return True


def _arrays_in(value: Any, path: str):
    if isinstance(value, np.ndarray):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _arrays_in(v, f"{path}/{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _arrays_in(v, f"{path}[{i}]" if path else f"array {i}")
    elif isinstance(value, (float, np.floating)):
        yield path, np.asarray(value)


def require_finite(what: str, value: Any) -> None:
    """Raise :class:`NonFiniteResult` if ``value`` (an array, a float, or nested dicts/lists of
    them) holds a NaN or an infinity; the message names ``what`` and the first offending entry."""
    for path, a in _arrays_in(value, ""):
        if not all_finite(a):
            flat = np.asarray(a).reshape(-1)
            bad = flat[~np.isfinite(flat)][0]
            where = f" {path}" if path else ""
            raise NonFiniteResult(f"{what}{where} is not finite (contains {bad})")


@dataclass(frozen=True)
class Rejection:
    """A reply that was not aggregated, and why."""

    partition_id: int | None
    reason: str

    def __str__(self) -> str:
        who = "a client" if self.partition_id is None else f"partition {self.partition_id}"
        return f"{who}: {self.reason}"


def check_policy(on_bad_reply: str) -> str:
    """Validate an ``on_bad_reply`` setting (``"drop"`` or ``"raise"``) and return it."""
    return check_choice("on_bad_reply", on_bad_reply, BAD_REPLY_POLICIES)


class SettingError(ValueError):
    """A setting that cannot run. The message names the setting and the value.

    Attributes ``name`` (the setting), ``value`` (what was given) and ``requirement`` (what would be
    valid) let front ends name the setting their own way (a CLI flag, a run-config key).
    """

    def __init__(self, name: str, value: Any, requirement: str) -> None:
        self.name = name
        self.value = value
        self.requirement = requirement
        super().__init__(f"{name} must be {requirement}, got {value!r}")


def is_int(value: Any) -> bool:
    """True for Python and NumPy integers (not booleans)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """True for Python and NumPy integers and floats (not booleans)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_number(name: str, value: Any, requirement: str, ok: Callable[[float], bool] = lambda v: True) -> float:
    """``value`` as a float; :class:`SettingError` (``"{name} must be {requirement}, got {value!r}"``)
    unless it is a finite real number with ``ok(value)``."""
    if not is_real(value) or not math.isfinite(float(value)) or not ok(float(value)):
        raise SettingError(name, value, requirement)
    return float(value)


def check_range(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a float; :class:`SettingError` (by :func:`check_number`) unless it is a finite real
    number within ``[low, high]`` (``low_open`` / ``high_open`` exclude that end; ``None`` leaves it
    unbounded)."""
    check_number(name, value, "a finite number")
    if low is not None:
        check_number(name, value, f"{'>' if low_open else '>='} {low}", lambda v: v > low if low_open else v >= low)
    if high is not None:
        check_number(name, value, f"{'<' if high_open else '<='} {high}", lambda v: v < high if high_open else v <= high)
    return float(value)


def check_choice(name: str, value: Any, options: Iterable[Any]) -> Any:
    """``value``; :class:`SettingError` unless it is one of ``options``."""
    options = tuple(options)
    if value not in options:
        raise SettingError(name, value, f"one of {options}")
    return value


def check_flag(name: str, value: Any) -> bool:
    """``value``; :class:`SettingError` unless it is ``True`` or ``False`` (not 0/1 or a string)."""
    if not isinstance(value, bool):
        raise SettingError(name, value, "True or False")
    return value


def check_integer(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an int; :class:`SettingError` unless it is an integer >= ``minimum``."""
    if not is_int(value) or int(value) < minimum:
        raise SettingError(name, value, f"an integer >= {minimum}")
    return int(value)


def check_max_num_examples(value: Any, name: str = "max_num_examples") -> int | dict[int, int] | None:
    """Validate a ``max_num_examples`` setting and return it as None, an ``int`` or ``{partition: int}``.

    None: counts are not bounded (Flower's behaviour). An integer >= 1: the most examples any
    reply may count. A mapping ``{partition_id: bound}`` (integers >= 0 to integers >= 1): each
    partition's own bound, e.g. its dataset size; a reply from a partition it does not name is
    rejected. Raises ``ValueError`` naming ``name`` and the value.
    """
    if value is None:
        return None
    if is_int(value) and value >= 1:
        return int(value)
    if isinstance(value, Mapping):
        for pid, bound in value.items():
            if not is_int(pid) or pid < 0 or not is_int(bound) or bound < 1:
                raise ValueError(f"{name} maps partition ids (integers >= 0) to bounds (integers >= 1), "
                                 f"got {pid!r}: {bound!r}")
        return {int(p): int(b) for p, b in value.items()}
    raise ValueError(f"{name} must be an integer >= 1, a {{partition_id: bound}} mapping or None, got {value!r}")


def cap_num_examples(
    valid: list[tuple[int, Reply]], max_num_examples: int | Mapping[int, int] | None
) -> tuple[list[tuple[int, Reply]], list[tuple[int, Rejection]], list[tuple[int, int, int]]]:
    """Bound the counts of ``valid`` (``(position, reply)`` from :func:`screen`) by ``max_num_examples``
    (see :func:`check_max_num_examples`).

    Returns ``(valid, rejected, clipped)``: the replies, those above their bound replaced by a copy
    that counts the bound (arrays and metrics shared, not copied); ``(position, rejection)`` for a
    reply from a partition the mapping does not name; and ``(partition, reported, bound)`` for each
    clipped reply.
    """
    if max_num_examples is None:
        return valid, [], []
    out: list[tuple[int, Reply]] = []
    rejected: list[tuple[int, Rejection]] = []
    clipped: list[tuple[int, int, int]] = []
    for pos, reply in valid:
        pid = int(reply.partition_id)
        if isinstance(max_num_examples, Mapping):
            bound = max_num_examples.get(pid)
            if bound is None:
                rejected.append((pos, Rejection(pid, f"max_num_examples has no bound for partition {pid}")))
                continue
        else:
            bound = max_num_examples
        n = int(reply.num_examples)
        if n > bound:
            clipped.append((pid, n, int(bound)))
            reply = Reply(reply.partition_id, reply.arrays, int(bound), reply.metrics)
        out.append((pos, reply))
    return out, rejected, clipped


def check_arrays(arrays: list[np.ndarray], spec: ReplySpec, *, finite: bool = True) -> str | None:
    """Problem with ``arrays`` against ``spec`` (count, shapes, exact dtypes, and with ``finite``
    finiteness), or None. Everything but finiteness is read from the arrays' metadata."""
    if not isinstance(arrays, list) or not all(isinstance(a, np.ndarray) for a in arrays):
        return "arrays are not a list of NumPy arrays"
    if spec.allow_empty and (len(arrays) == 0 or all(a.size == 0 for a in arrays)):
        return None
    if spec.arrays is not None:
        if len(arrays) != len(spec.arrays):
            return f"expected {len(spec.arrays)} arrays, got {len(arrays)}"
        for j, (a, s) in enumerate(zip(arrays, spec.arrays)):
            if len(a.shape) != len(s.shape) or any(e != -1 and e != g for e, g in zip(s.shape, a.shape)):
                return f"array {j} has shape {tuple(a.shape)}, expected {tuple(s.shape)}"
            if s.dtype is not None:
                if a.dtype != np.dtype(s.dtype):
                    return f"array {j} has dtype {_name(a.dtype)}, expected {_name(np.dtype(s.dtype))} (the dtype sent)"
            elif s.kind != "*" and (dtype_group(a.dtype) != s.kind or (s.kind == "f" and a.dtype.kind == "c")):
                return f"array {j} has dtype {_name(a.dtype)}, expected kind '{s.kind}'"
    return nonfinite_problem(arrays) if finite else None


def nonfinite_problem(arrays: list[np.ndarray]) -> str | None:
    """``"array j contains NaN or infinite values"`` for the first such array, or None."""
    for j, a in enumerate(arrays):
        if not all_finite(a):
            return f"array {j} contains NaN or infinite values"
    return None


def _name(dtype: np.dtype) -> str:
    """``float32``, or ``>f4`` where the byte order is not the machine's."""
    return dtype.name if dtype.isnative else dtype.str


def check_reply(
    reply: Reply,
    spec: ReplySpec,
    *,
    num_partitions: int | None,
    sampled: set[int] | None,
    seen: set[int] | dict[int, Any],
    finite: bool = True,
) -> str | None:
    """The first problem with ``reply`` (a sentence), or None when it may be aggregated.

    ``finite=False`` leaves out the one check that reads every value (NaN and infinities in the
    arrays): for a core whose aggregate shows them (see :func:`screen`)."""
    pid = reply.partition_id
    if not is_int(pid):
        return f"partition id {pid!r} is not an integer"
    if pid < 0 or (num_partitions is not None and pid >= num_partitions):
        upper = "" if num_partitions is None else f"..{num_partitions - 1}"
        return f"partition id {pid} is outside 0{upper}"
    if sampled is not None and pid not in sampled:
        return f"partition {pid} was not sampled this round"
    if pid in seen:
        return f"second reply from partition {pid} this round"
    if not is_int(reply.num_examples) or reply.num_examples < 0:
        return f"num_examples {reply.num_examples!r} is not an integer >= 0"
    problem = check_arrays(reply.arrays, spec, finite=finite)
    if problem is not None:
        return problem
    for key in spec.required_metrics:
        if key not in reply.metrics:
            return f"metric '{key}' is missing (is the client running the matching method?)"
        value = reply.metrics[key]
        if not is_real(value):
            return f"metric '{key}' = {value!r} is not a number"
        if not math.isfinite(float(value)):
            return f"metric '{key}' = {value!r} is not finite"
    return None


def screen(
    core: "ServerCore",
    server_round: int,
    replies: list[Reply],
    *,
    sampled: Iterable[int] | None,
    on_bad_reply: str = "drop",
    finite: bool = True,
) -> tuple[list[tuple[int, Reply]], list[tuple[int, Rejection]]]:
    """Split ``replies`` into valid ones and rejections, with each reply's position in ``replies``:
    ``(valid, rejected)`` as ``(position, reply)`` sorted by partition id and ``(position,
    rejection)`` in order. Raises :class:`ReplyError` on the first bad reply when
    ``on_bad_reply == "raise"``; nothing has been changed at that point.

    ``finite=False`` defers the finiteness of the valid replies' arrays (the one check that reads
    every value) to :func:`nonfinite_replies`, for a core whose aggregate is not finite when a
    reply is not (:attr:`~flwr_strategies.core.server.ServerCore.aggregate_reveals_nonfinite`).
    Every reply it does reject gets the reason it gets with ``finite=True``, and ``"raise"`` names
    the same reply: a reply rejected for another reason is checked in full, and before raising,
    the valid replies that came before it are checked for finiteness.
    """
    check_policy(on_bad_reply)
    sampled_set = None if sampled is None else {int(p) for p in sampled}
    seen: dict[int, int] = {}  # partition id -> index into valid
    valid: list[tuple[int, Reply] | None] = []
    rejected: list[tuple[int, Rejection]] = []
    name = type(core).__name__

    def fail(pos: int, rejection: Rejection) -> None:
        if on_bad_reply == "raise":
            # a valid reply before this one may hold NaN: it would have been named first
            bad = [] if finite else nonfinite_replies([item for item in valid if item is not None and item[0] < pos])
            if bad:
                raise ReplyError(f"{name} round {server_round}: {bad[0][1]}")
            raise ReplyError(f"{name} round {server_round}: {rejection}")
        rejected.append((pos, rejection))

    for pos, reply in enumerate(replies):
        pid = reply.partition_id
        if not finite and is_int(pid) and int(pid) in seen:
            # a first reply that holds NaN is rejected, and then this one is not a second reply
            k = seen[int(pid)]
            first_pos, first = valid[k]
            why = nonfinite_problem(first.arrays)
            if why is not None:
                valid[k] = None
                del seen[int(pid)]
                fail(first_pos, Rejection(int(pid), why))
        if is_int(pid) and 0 <= pid and (core.num_partitions is None or pid < core.num_partitions):
            spec = core.reply_spec(server_round, int(pid))
        else:
            spec = ReplySpec()
        problem = check_reply(reply, spec, num_partitions=core.num_partitions, sampled=sampled_set, seen=seen,
                              finite=finite)
        if problem is None:
            try:
                core.check_reply(server_round, reply)
            except ReplyError as err:
                problem = str(err)
            if problem is not None and not finite:  # finiteness is checked before the core's own checks
                problem = nonfinite_problem(reply.arrays) or problem
        elif not finite:  # the first problem in the full order of checks
            problem = check_reply(reply, spec, num_partitions=core.num_partitions, sampled=sampled_set, seen=seen)
        if problem is not None:
            fail(pos, Rejection(int(pid) if is_int(pid) else None, problem))
            continue
        seen[int(pid)] = len(valid)
        valid.append((pos, reply))
    kept = [item for item in valid if item is not None]
    for pos, rejection in diverged_replies(kept):
        fail(pos, rejection)
        kept = [item for item in kept if item[0] != pos]
    out = sorted(kept, key=lambda item: item[1].partition_id)
    rejected.sort(key=lambda item: item[0])
    return out, rejected


#: the metric in which a client reports its own training loss (Flower's quickstart and this library's clients)
TRAIN_LOSS_KEY = "train_loss"
#: a reply whose train loss is more than this many times the median of the other replies' has diverged
DIVERGED_LOSS_RATIO = 1e4


def _train_loss(reply: Reply) -> float | None:
    value = reply.metrics.get(TRAIN_LOSS_KEY) if isinstance(reply.metrics, dict) else None
    return float(value) if is_real(value) else None


def diverged_replies(valid: list[tuple[int, Reply]]) -> list[tuple[int, Rejection]]:
    """``(position, rejection)`` for each reply whose own reported ``train_loss`` says its local
    training diverged: the loss is NaN or infinite, or it is more than :data:`DIVERGED_LOSS_RATIO`
    (four orders of magnitude) times the median of the other replies' finite train losses (a reply
    whose train loss is 5.9e16 among others near 1 is not averaged into the model). Replies
    without a numeric ``train_loss`` are not judged."""
    losses = [(pos, reply, _train_loss(reply)) for pos, reply in valid]
    out = []
    for pos, reply, loss in losses:
        if loss is None:
            continue
        if not math.isfinite(loss):
            why = f"diverged: its reported {TRAIN_LOSS_KEY} is {loss!r} (non-finite)"
            out.append((pos, Rejection(int(reply.partition_id), why)))
            continue
        others = [v for p, _, v in losses if p != pos and v is not None and math.isfinite(v)]
        if others:
            median = float(np.median(others))
            if median > 0 and loss > DIVERGED_LOSS_RATIO * median:
                out.append((pos, Rejection(int(reply.partition_id), (
                    f"diverged: its reported {TRAIN_LOSS_KEY} {loss:.4g} is more than {DIVERGED_LOSS_RATIO:g} times the "
                    f"median of the other replies' ({median:.4g})"))))
    return sorted(out, key=lambda item: item[0])


def nonfinite_replies(valid: list[tuple[int, Reply]]) -> list[tuple[int, Rejection]]:
    """``(position, rejection)`` for each reply whose arrays hold a NaN or an infinity, by position:
    the deferred half of :func:`screen` (``finite=False``)."""
    out = [(pos, Rejection(int(reply.partition_id), why)) for pos, reply in valid
           if (why := nonfinite_problem(reply.arrays)) is not None]
    return sorted(out, key=lambda item: item[0])
