"""Oracles T11 (seed replay), T15/T16 (personalised learning rates), T22 (accounting)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from flwr_strategies.fedmezo import (MeZOEngine, PersonalisedLR, decode_pairs, encode_pairs,
                                     normalise_signals, personalised_lrs, replay_updates)
from flwr_strategies.fedmezo.accounting import count_lora_params, gamma, lr_sqrt_d_heuristic, payload_bytes, zeta
from flwr_strategies.fedmezo.local import cursor_indices, mezo_local_train
from flwr_strategies.fedmezo.lr_rules import model_diff_signal


def _net():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    x, y = torch.randn(40, 5), torch.randn(40, 1)
    return m, (lambda idx: ((m(x[idx]) - y[idx]) ** 2).mean())


@pytest.mark.parametrize("mode", ["snapshot", "regenerate"])
def test_seed_replay_equals_plain_upload(mode):
    m, loss_on = _net()
    start = [p.detach().numpy().copy() for p in m.parameters()]
    eng = MeZOEngine(m, mu=1e-3, restore_mode=mode)
    out = mezo_local_train(eng, loss_on, 40, lr=0.02, steps=30, batch_size=2, run_seed=3, server_round=2, partition_id=1)
    assert len(out["pairs"]) == 30
    blob = encode_pairs(out["pairs"])
    assert len(blob) == 30 * 16
    pairs = decode_pairs(blob)
    assert pairs == out["pairs"]
    rep = replay_updates(start, pairs, 0.02)
    final = [p.detach().numpy() for p in m.parameters()]
    for r, f in zip(rep, final):
        if mode == "snapshot":
            assert np.array_equal(r, f)
        else:
            assert np.max(np.abs(r - f)) <= 1e-6


def test_replay_bad_payload():
    with pytest.raises(ValueError, match="multiple of 16"):
        decode_pairs(b"\x00" * 10)


def test_cursor_is_a_permutation_per_epoch():
    idx = cursor_indices(7, 0, 21, run_seed=0, partition_id=2)
    for e in range(3):
        assert sorted(idx[7 * e: 7 * e + 7]) == list(range(7))
    assert idx[:7] != idx[7:14] or idx[7:14] != idx[14:21]
    assert cursor_indices(7, 5, 4, 0, 2) == idx[5:9]
    with pytest.raises(ValueError, match="empty training set"):
        cursor_indices(0, 0, 1, 0, 0)


def test_empty_client_dataset_error():
    m, loss_on = _net()
    with pytest.raises(ValueError, match="empty training set"):
        mezo_local_train(MeZOEngine(m), loss_on, 0, lr=0.1, steps=2, batch_size=1, run_seed=0, server_round=1, partition_id=4)


def test_normalisation_worked_example():
    phi = normalise_signals([2.0, 2.5, 3.5])
    assert np.allclose(phi, [-0.8, -0.2, 1.0], atol=1e-12)
    eta = personalised_lrs([2.0, 2.5, 3.5], 1e-5, 5e-6)
    assert np.allclose(eta, [6e-6, 9e-6, 1.5e-5], rtol=0, atol=1e-18)
    assert normalise_signals([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert normalise_signals([1.0, float("nan"), 2.0]) == [0.0, 0.0, 0.0]
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = rng.normal(size=5)
        eta = np.array(personalised_lrs(s, 1e-5, 5e-6))
        assert np.all(eta >= 5e-6 - 1e-20) and np.all(eta <= 1.5e-5 + 1e-20)
        assert np.isclose(np.max(np.abs(eta - 1e-5)), 5e-6, rtol=0, atol=1e-20)


def test_round_wise_and_five_round_history():
    rw = PersonalisedLR("round-wise", eta0=1e-5, alpha=5e-6)
    assert rw.rates(1, [0, 1, 2]) == {0: 1e-5, 1: 1e-5, 2: 1e-5}
    rw.record(1, {0: 2.0, 1: 2.5, 2: 3.5})
    r = rw.rates(2, [0, 1, 2])
    assert np.allclose([r[0], r[1], r[2]], [6e-6, 9e-6, 1.5e-5], atol=1e-18)
    fr = PersonalisedLR("five-round", eta0=1e-5, alpha=5e-6, window=5)
    losses = {0: [1, 2, 3, 4, 5, 6], 1: [2, 2, 2, 2, 2, 2], 2: [0, 0, 0, 0, 0, 9]}
    for t in range(1, 6):
        assert fr.rates(t, [0, 1, 2]) == {0: 1e-5, 1: 1e-5, 2: 1e-5}
        fr.record(t, {c: float(v[t - 1]) for c, v in losses.items()})
    r = fr.rates(6, [0, 1, 2])
    exp = personalised_lrs([3.0, 2.0, 0.0], 1e-5, 5e-6)
    assert np.allclose([r[0], r[1], r[2]], exp, atol=1e-18)
    fr.record(6, {c: float(v[5]) for c, v in losses.items()})
    r = fr.rates(7, [0, 1, 2])
    exp = personalised_lrs([4.0, 2.0, 1.8], 1e-5, 5e-6)
    assert np.allclose([r[0], r[1], r[2]], exp, atol=1e-18)


def test_model_diff_signal_and_rule():
    a = [np.array([[3.0, 4.0]]), np.array([1.0, 0.0, 0.0])]
    g = [np.zeros((1, 2)), np.zeros(3)]
    assert model_diff_signal(a, g) == pytest.approx(5.0 + 1.0)
    md = PersonalisedLR("model-diff", eta0=1e-5, alpha=5e-6)
    md.record(3, {}, {0: 1.0, 1: 3.0})
    r = md.rates(4, [0, 1, 2])  # client 2 has no signal -> eta0
    assert r[2] == 1e-5 and np.isclose(r[0], 5e-6) and np.isclose(r[1], 1.5e-5)
    assert md.rates(5, [0, 1]) == {0: 1e-5, 1: 1e-5}  # stale signal


def test_random_rule_bounds_and_repeatable():
    a = PersonalisedLR("random", eta0=1e-5, alpha=5e-6, seed=4)
    b = PersonalisedLR("random", eta0=1e-5, alpha=5e-6, seed=4)
    for t in range(1, 20):
        ra, rb = a.rates(t, [0, 1, 2]), b.rates(t, [0, 1, 2])
        assert ra == rb
        assert all(5e-6 <= v <= 1.5e-5 for v in ra.values())
    assert a.rates(1, [0, 1, 2]) != a.rates(2, [0, 1, 2])


@pytest.mark.parametrize("kw,msg", [(dict(strategy="x"), "lr_strategy"), (dict(eta0=0.0), "eta0"),
                                    (dict(alpha=2e-5), "lr_alpha"), (dict(window=0), "lr_window")])
def test_bad_lr_rule_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        PersonalisedLR(**kw)


def test_accounting():
    n = count_lora_params(hidden=3200, layers=26, r=128, targets=2)
    assert n == 42_598_400 and payload_bytes(n) == 85_196_800
    for d in (10, 4096, 42_598_400):
        assert math.isclose(gamma(d, 7.0) * zeta(d, 7.0), 1 / d, rel_tol=1e-12)
    assert math.isclose(lr_sqrt_d_heuristic(3e9), 1.826e-5, rel_tol=1e-3)
