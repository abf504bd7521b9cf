"""FedAvg-family cores check the replies' finiteness in the aggregate (one pass over the values,
``aggregate_reveals_nonfinite``) instead of before it. The outcome must be the one of checking
first: the same rejections with the same reasons in the same order, the same error under
``"raise"``, the same model, and a round whose finite replies overflow is still rejected with the
state unchanged. The oracle is the same core with the check done first."""

from __future__ import annotations

import numpy as np
import pytest

from flwr_strategies.baselines.server import FedAdamServer, FedAvgServer
from flwr_strategies.core.messages import Reply, ReplySpec
from flwr_strategies.core.validation import ReplyError

INIT = [np.zeros((3, 4), np.float32), np.zeros(2, np.int64)]


class _Deferred(FedAvgServer):
    """FedAvg whose replies must also report ``train_loss`` (a check after the arrays' checks)."""

    def reply_spec(self, server_round, partition_id):
        return ReplySpec(self.model_spec, ("train_loss",))


class _Eager(_Deferred):
    aggregate_reveals_nonfinite = False


def _reply(pid, value=1.0, n=10, loss=0.5, **kw):
    arrays = [np.full((3, 4), value, np.float32), np.array([pid, 1], np.int64)]
    metrics = {"train_loss": loss}
    if "drop_metric" in kw:
        metrics = {}
    if "shape" in kw:
        arrays[0] = np.zeros((4, 3), np.float32)
    return Reply(pid, arrays, n, metrics)


def _nan(pid, **kw):
    r = _reply(pid, **kw)
    r.arrays[0] = r.arrays[0].copy()
    r.arrays[0][1, 2] = np.nan
    return r


SCENARIOS = {
    "one_nan": lambda: [_reply(0), _nan(1), _reply(2, 2.0)],
    "inf_then_wrong_shape": lambda: [_reply(0), _nan(3, value=np.inf), _reply(1, shape=True), _reply(2)],
    "wrong_shape_then_nan": lambda: [_reply(1, shape=True), _nan(0), _reply(2)],
    "nan_then_second_reply": lambda: [_nan(1), _reply(0), _reply(1, 5.0)],
    "nan_and_missing_metric": lambda: [_reply(0), _nan(1, drop_metric=True), _reply(2, drop_metric=True)],
    "nan_and_zero_examples": lambda: [_nan(0, n=0), _reply(1), _reply(2, n=0)],
    "every_reply_nan": lambda: [_nan(0), _nan(1)],
    "all_good": lambda: [_reply(2, 3.0), _reply(0), _reply(1, 2.0)],
}


def _core(cls):
    core = cls(INIT, num_partitions=6, seed=0)
    core.train_round(1, [_reply(p, 0.25) for p in range(3)], sampled=range(3))  # a state to keep
    return core


def _outcome(cls, scenario, policy):
    core = _core(cls)
    before = [a.copy() for a in core.global_arrays()]
    try:
        result = core.train_round(2, SCENARIOS[scenario](), sampled=range(4), on_bad_reply=policy)
    except ReplyError as err:
        return ("raised", str(err).replace(cls.__name__, "Core"), before, core.global_arrays())
    rejections = [str(r) for r in result.rejections]
    return (dict(result), rejections, before, core.global_arrays())


@pytest.mark.parametrize("policy", ["drop", "raise"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_checking_in_the_aggregate_gives_what_checking_first_gives(scenario, policy):
    eager = _outcome(_Eager, scenario, policy)
    deferred = _outcome(_Deferred, scenario, policy)
    assert deferred[:2] == eager[:2]
    for a, b in zip(deferred[3], eager[3]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    if eager[0] == "raised" or eager[0].get("round_rejected"):
        for a, b in zip(deferred[3], deferred[2]):  # the state is what it was
            assert np.array_equal(a, b)


def test_the_scenarios_exercise_what_they_name():
    drop = {s: _outcome(_Deferred, s, "drop") for s in SCENARIOS}
    assert drop["one_nan"][1] == ["partition 1: array 0 contains NaN or infinite values"]
    assert drop["inf_then_wrong_shape"][1][0] == "partition 3: array 0 contains NaN or infinite values"
    assert "shape" in drop["inf_then_wrong_shape"][1][1]
    # the first reply of partition 1 holds NaN, so the second is not a duplicate: it is averaged
    assert drop["nan_then_second_reply"][0]["rejected"] == 1
    assert drop["nan_then_second_reply"][3][0][0, 0] == np.float32(0.5 * 1.0 + 0.5 * 5.0)
    assert drop["nan_and_missing_metric"][1][0].endswith("NaN or infinite values")
    assert "train_loss" in drop["nan_and_missing_metric"][1][1]
    assert drop["all_good"][0]["rejected"] == 0
    raised = _outcome(_Deferred, "wrong_shape_then_nan", "raise")
    assert raised[0] == "raised" and "shape" in raised[1]
    raised = _outcome(_Deferred, "inf_then_wrong_shape", "raise")
    assert raised[0] == "raised" and "partition 3: array 0 contains NaN" in raised[1]


class _EagerAdam(FedAdamServer):
    aggregate_reveals_nonfinite = False


@pytest.mark.parametrize("policy", ["drop", "raise"])
def test_finite_replies_whose_step_overflows_reject_the_round_as_before(policy):
    """FedAdam's second moment of a 3e38 update is infinite although every reply is finite: the
    round is rejected (``"raise"``: an error) with the state kept, as when checking first."""
    outcomes = []
    for cls in (FedAdamServer, _EagerAdam):
        core = cls(INIT[:1], num_partitions=4, seed=0)
        core.train_round(1, [Reply(p, [np.full((3, 4), 0.5, np.float32)], 5, {}) for p in range(2)], sampled=range(2))
        before = [core.current[0].copy(), core.m_t[0].copy(), core.v_t[0].copy()]
        huge = [Reply(p, [np.full((3, 4), 3e38, np.float32)], 5, {}) for p in range(2)]
        try:
            out = core.train_round(2, huge, sampled=range(2), on_bad_reply=policy)
            outcomes.append((out["round_rejected"], out["rejected"], [str(r) for r in out.rejections]))
        except ReplyError as err:
            outcomes.append(str(err).replace(cls.__name__, "Core"))
        assert all(np.array_equal(a, b) for a, b in zip([core.current[0], core.m_t[0], core.v_t[0]], before))
    assert outcomes[0] == outcomes[1]
    assert "not finite" in str(outcomes[0])


def test_a_nan_reply_to_fedadam_is_rejected_and_its_moments_are_kept():
    core = FedAdamServer(INIT[:1], num_partitions=4, seed=0)
    assert core.aggregate_reveals_nonfinite
    core.train_round(1, [Reply(p, [np.full((3, 4), 0.5, np.float32)], 5, {}) for p in range(2)], sampled=range(2))
    m_t = [a.copy() for a in core.m_t]
    bad = Reply(1, [np.full((3, 4), np.inf, np.float32)], 5, {})
    out = core.train_round(2, [Reply(0, [np.full((3, 4), 0.5, np.float32)], 5, {}), bad], sampled=range(2))
    assert out["rejected"] == 1 and out["round_rejected"] == 0
    assert np.isfinite(core.m_t[0]).all() and not np.array_equal(core.m_t[0], m_t[0])  # moved, on partition 0 only
