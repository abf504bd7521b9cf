"""Oracles 9-11, 21, 22 of the DO-ADP spec: Top-k, clipping, mixing matrix, theory helpers."""

import numpy as np
import pytest

from flwr_strategies.doadp import clip_per_sample, rand_k, top_k, top_k_dense, top_k_indices
from flwr_strategies.doadp.graphs import circulant_mixing
from flwr_strategies.doadp.simulator import check_mixing
from flwr_strategies.doadp.theory import c_const, gamma_theory, momentum_bound, phi, spectral_gap


@pytest.mark.parametrize("d,k", [(10, 1), (10, 3), (50, 17), (200, 200), (7, 6)])
def test_topk_properties(d, k):
    rng = np.random.default_rng(d * 1000 + k)
    for _ in range(50):
        x = rng.normal(size=d) * rng.exponential(size=d)
        idx, val = top_k(x, k)
        assert idx.dtype == np.int64 and len(idx) == k and len(np.unique(idx)) == k
        assert np.array_equal(val, x[idx])
        kept = np.abs(x[idx]).min()
        rest = np.delete(np.abs(x), idx)
        assert rest.size == 0 or rest.max() <= kept
        tk = top_k_dense(x, k)
        assert np.count_nonzero(tk) == k
        assert np.array_equal(top_k_dense(tk, k), tk)  # idempotent
        assert np.all(tk * (x - tk) == 0)
        assert np.sum((tk - x) ** 2) <= (1 - k / d) * np.sum(x**2) + 1e-12  # Lemma 7
    if k == d:
        assert np.array_equal(top_k_dense(x, k), x)


def test_topk_ties_smaller_index_and_errors():
    x = np.array([1.0, -2.0, 2.0, 2.0, 0.5])
    assert list(top_k_indices(x, 2)) == [1, 2]
    assert list(top_k_indices(x, 3)) == [1, 2, 3]
    with pytest.raises(ValueError, match="k=0"):
        top_k(x, 0)
    with pytest.raises(ValueError, match="k=6"):
        top_k(x, 6)


def test_topk_is_biased_but_randk_unscaled_is_unbiased_times_k_over_d():
    d, k = 8, 3
    x = np.arange(1.0, d + 1)
    rng = np.random.default_rng(0)
    acc = np.zeros(d)
    err = 0.0
    N = 20000
    for _ in range(N):
        idx, val = rand_k(x, k, rng)
        v = np.zeros(d)
        v[idx] = val
        acc += v
        err += np.sum((v - x) ** 2)
    assert np.allclose(acc / N, k / d * x, rtol=0.03)
    assert err / N <= (1 - k / d) * np.sum(x**2) * 1.02
    assert not np.allclose(top_k_dense(x, k), k / d * x)


def test_coordinate_clipping():
    rng = np.random.default_rng(1)
    d, G = 64, 1.3
    g = rng.normal(size=(5, d)) * 3
    c = clip_per_sample(g, G, "coordinate")
    assert np.abs(c).max() <= G / np.sqrt(d) + 1e-15
    assert np.all(np.linalg.norm(c, axis=1) <= G + 1e-12)
    small = rng.uniform(-1, 1, size=(3, d)) * G / np.sqrt(d) * 0.99
    assert np.array_equal(clip_per_sample(small, G, "coordinate"), small)
    l2 = clip_per_sample(g, G, "l2")
    assert np.allclose(np.linalg.norm(l2, axis=1), G)
    assert np.array_equal(clip_per_sample(g, None), g)
    with pytest.raises(ValueError, match="clip_mode"):
        clip_per_sample(g, G, "bad")


def test_mixing_matrix_values():  # oracle 11
    W = circulant_mixing(20, 3)
    check_mixing(W)
    assert np.allclose(W, W.T) and np.allclose(W.sum(0), 1) and np.allclose(W.sum(1), 1)
    A = np.zeros((20, 20))
    for i in range(20):
        for j in (1, 2, 3):
            A[i, (i + j) % 20] = A[i, (i - j) % 20] = 1
    assert np.array_equal(W > 0, (A + np.eye(20)) > 0)
    ev = np.sort(np.abs(np.linalg.eigvalsh(W)))[::-1]
    assert ev[0] == pytest.approx(1.0) and ev[1] < 1
    assert spectral_gap(W) == pytest.approx(0.186326, abs=1e-5)
    assert phi(W) == pytest.approx(1.231148, abs=1e-5)
    assert 1 - spectral_gap(W) == pytest.approx(0.813674, abs=1e-5)
    W8 = circulant_mixing(20, 3, iota=8)
    assert spectral_gap(W8) == pytest.approx(0.163035, abs=1e-5)
    assert phi(W8) == pytest.approx(1.077254, abs=1e-5)


def test_disconnected_graph_rejected():
    W = np.zeros((4, 4))
    W[:2, :2] = 0.5
    W[2:, 2:] = 0.5
    with pytest.raises(ValueError, match="not connected"):
        check_mixing(W)
    with pytest.raises(ValueError, match="symmetric"):
        check_mixing(np.array([[0.5, 0.5], [0.2, 0.8]]))


def test_gamma_theory_table():  # oracle 21
    W = circulant_mixing(20, 3)
    rho, ph = spectral_gap(W), phi(W)
    table = {(1, 1.0): (0.02285, 4.23e-4), (0.8, 1.0): (0.01764, 3.39e-4), (1, 0.3): (0.00608, 1.27e-4),
             (0.8, 0.3): (0.00482, 1.02e-4), (1, 0.4): (0.00824, 1.69e-4), (0.8, 0.4): (0.00650, 1.36e-4)}
    d = 1000
    for (p, kd), (g, c) in table.items():
        assert gamma_theory(rho, ph, p, int(kd * d), d) == pytest.approx(g, abs=6e-6)
        assert c_const(rho, p, int(kd * d), d) == pytest.approx(c, abs=6e-7)
    gs = [gamma_theory(rho, ph, p, 300, d) for p in (0.5, 0.7, 0.9, 1.0)]
    assert all(a < b for a, b in zip(gs, gs[1:]))
    gk = [gamma_theory(rho, ph, 0.8, k, d) for k in (1, 100, 500, 1000)]
    assert all(a < b for a, b in zip(gk, gk[1:]))


def test_lemma2_momentum_bound_monte_carlo():  # oracle 22
    d, G, sigma, beta, p = 16, 1.0, 0.3, 0.5, 0.7
    rng = np.random.default_rng(3)
    R, T = 4000, 30
    m = np.zeros((R, d))
    for _ in range(T):
        active = rng.random(R) < p
        g = clip_per_sample(rng.normal(size=(R, d)) * 2, G)
        upd = g + rng.normal(0, sigma, size=(R, d)) + beta * m
        m = np.where(active[:, None], upd, beta * m)
        assert np.mean(np.sum(m**2, axis=1)) <= momentum_bound(p, G, sigma, d, beta)
