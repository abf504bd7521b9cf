"""Sparse mixing step, failures, consensus distance (spec oracle 13; issue: failed clients)."""

import numpy as np
import pytest
import scipy.sparse as sp

from flwr_strategies.decentralized import (
    ModelLayout,
    ModelTable,
    Topology,
    consensus_distance,
    is_doubly_stochastic,
    mix,
    mixing_matrix,
    network_average,
    restrict_to_alive,
    validate_mixing,
)


def _table(m, d, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal((m, d)).astype(dtype)


@pytest.mark.parametrize("name", ["ring", "random", "erdos_renyi", "watts_strogatz", "exponential", "full"])
def test_doubly_stochastic_mixing_preserves_average(name):
    m, d = 24, 1000
    X = _table(m, d)
    W = mixing_matrix(Topology(name, m, seed=5).graph(0), allow_disconnected=True)
    Y = mix(W, X)
    np.testing.assert_allclose(Y.mean(axis=0), X.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(Y, W.toarray() @ X, atol=1e-12)  # equals the dense product


def test_mixing_contracts_consensus_distance_by_psi_squared():
    m, d = 16, 500
    X = _table(m, d, 1)
    W = mixing_matrix(Topology("ring", m).graph(0))
    Y = mix(W, X)
    psi = 1 / 3 + 2 / 3 * np.cos(2 * np.pi / m)
    assert consensus_distance(Y) <= psi**2 * consensus_distance(X) + 1e-12
    # full averaging reaches consensus in one step
    Z = mix(mixing_matrix(Topology("full", m).graph(0)), X)
    assert consensus_distance(Z) == pytest.approx(0.0, abs=1e-20)
    np.testing.assert_allclose(Z, np.tile(X.mean(axis=0), (m, 1)), atol=1e-12)


def test_consensus_distance_definition():
    X = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]])
    xbar = X.mean(axis=0)
    expected = np.mean(np.sum((X - xbar) ** 2, axis=1))
    assert consensus_distance(X, chunk=1) == pytest.approx(expected)
    np.testing.assert_allclose(network_average(X), xbar)


def test_inplace_and_chunked_mixing_match():
    m, d = 10, 1037
    X = _table(m, d, 2, np.float32)
    W = mixing_matrix(Topology("random", m, seed=1, neighbours=4).graph(3), allow_disconnected=True)
    ref = mix(W, X)
    Y = X.copy()
    mix(W, Y, out=Y, block=100)
    np.testing.assert_array_equal(Y, ref)
    np.testing.assert_allclose(ref, W.toarray() @ X, rtol=1e-5, atol=1e-5)
    assert ref.dtype == np.float32


@pytest.mark.parametrize("policy", ["renormalize", "self"])
def test_failed_client_keeps_model_and_mixing_stays_valid(policy):
    m, d = 12, 50
    W = mixing_matrix(Topology("random", m, seed=9, neighbours=6).graph(0))
    alive = np.ones(m, dtype=bool)
    alive[[2, 7]] = False
    R = restrict_to_alive(W, alive, policy)
    validate_mixing(R, allow_row_stochastic=(policy == "renormalize"))
    Rd, Wd = R.toarray(), W.toarray()
    # failed rows: identity; nobody gives weight to a failed client
    np.testing.assert_array_equal(Rd[[2, 7]], np.eye(m)[[2, 7]])
    assert np.all(Rd[np.ix_(alive, ~alive)] == 0)
    # live rows: same support as W restricted to live clients
    live = np.flatnonzero(alive)
    assert np.array_equal(Rd[np.ix_(live, live)] > 0, Wd[np.ix_(live, live)] > 0)
    if policy == "renormalize":
        expect = Wd[np.ix_(live, live)] / Wd[np.ix_(live, live)].sum(axis=1, keepdims=True)
        np.testing.assert_allclose(Rd[np.ix_(live, live)], expect, atol=1e-12)
    else:
        assert is_doubly_stochastic(R)
        X = _table(m, d, 4)
        np.testing.assert_allclose(mix(R, X).mean(axis=0), X.mean(axis=0), atol=1e-12)
    X = _table(m, d, 3)
    Y = mix(R, X)
    np.testing.assert_array_equal(Y[[2, 7]], X[[2, 7]])  # failed clients keep their model
    assert np.isfinite(Y).all()


def test_all_failed_means_nothing_changes():
    m = 5
    W = mixing_matrix(Topology("ring", m).graph(0))
    R = restrict_to_alive(W, np.zeros(m, dtype=bool))
    np.testing.assert_array_equal(R.toarray(), np.eye(m))


def test_validate_rejects_bad_matrices():
    from flwr_strategies.decentralized import MixingError

    with pytest.raises(MixingError, match="row 0"):
        validate_mixing(sp.csr_matrix(np.array([[0.5, 0.4], [0.5, 0.5]])))
    with pytest.raises(MixingError, match="negative"):
        validate_mixing(sp.csr_matrix(np.array([[1.5, -0.5], [0.5, 0.5]])))
    with pytest.raises(MixingError, match="self weight"):
        validate_mixing(sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])))
    with pytest.raises(MixingError, match="column"):
        validate_mixing(sp.csr_matrix(np.array([[0.5, 0.5], [0.2, 0.8]])))
    validate_mixing(sp.csr_matrix(np.array([[0.5, 0.5], [0.2, 0.8]])), allow_row_stochastic=True)


def test_mixing_cost_is_sparse():
    # nnz(W) = m + edges, so W @ X touches edges x d entries, not m^2 x d
    m = 200
    W = mixing_matrix(Topology("ring", m).graph(0))
    assert W.nnz == 3 * m


def test_model_table_roundtrip():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.5], dtype=np.float32), np.array(3, dtype=np.int64)]
    t = ModelTable.replicate(arrays, 4)
    assert t.data.shape == (4, 8) and t.data.flags["C_CONTIGUOUS"]
    back = t.row_arrays(2)
    for a, b in zip(arrays, back):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="shape"):
        ModelLayout.of(arrays).flatten([np.zeros((3, 2)), arrays[1], arrays[2]])
