"""Topologies and mixing matrices: spectral values, degrees, validity (spec oracles 12, 18, 19)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from flwr_strategies.decentralized import (
    MixingError,
    Topology,
    is_doubly_stochastic,
    mixing_matrix,
    second_eigenvalue_modulus,
    spectral_gap,
)

M = 100


@pytest.mark.parametrize(
    "name,expected",
    [
        ("ring", 1 / 3 + (2 / 3) * math.cos(2 * math.pi / 100)),
        ("full", 0.0),
        ("exponential", 0.75),
        ("exponential_sym", 0.7333333333),
        # torus 10x10, weights 1/5: eigenvalues (1 + 2cos(2pi a/10) + 2cos(2pi b/10))/5,
        # second largest modulus at (a, b) = (1, 0)
        ("grid", (1 + 2 * math.cos(2 * math.pi / 10) + 2) / 5),
    ],
)
def test_spectral_values_m100(name, expected):
    W = mixing_matrix(Topology(name, M).graph(0))
    assert second_eigenvalue_modulus(W) == pytest.approx(expected, abs=1e-6)
    assert spectral_gap(W) == pytest.approx(1 - expected, abs=1e-6)


def test_spectral_gap_small_known_graphs():
    # complete graph on 4 with uniform 1/4: W = J/4, psi = 0
    assert second_eigenvalue_modulus(mixing_matrix(Topology("full", 4).graph())) == pytest.approx(0, abs=1e-12)
    # ring of 3 = complete graph on 3 with weights 1/3
    assert spectral_gap(mixing_matrix(Topology("ring", 3).graph())) == pytest.approx(1.0)
    # ring of 4, weights 1/3: eigenvalues (1 + 2cos(2pi k/4))/3 = 1, 1/3, -1/3, 1/3 -> psi = 1/3
    assert second_eigenvalue_modulus(mixing_matrix(Topology("ring", 4).graph())) == pytest.approx(1 / 3)
    # path 0-1-2 with MH weights: w_01 = w_12 = 1/(1 + max deg) = 1/3
    path = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]]))
    W = mixing_matrix(path, "metropolis_hastings")
    A = np.array([[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    np.testing.assert_allclose(W.toarray(), A)
    ev = sorted(np.abs(np.linalg.eigvalsh(A)))
    assert second_eigenvalue_modulus(W) == pytest.approx(ev[1])


@pytest.mark.parametrize("name,deg", [("ring", 2), ("grid", 4), ("exponential", 7), ("full", 99), ("watts_strogatz", 8)])
def test_neighbour_counts(name, deg):
    a = Topology(name, M, seed=3).graph(0)
    degrees = np.asarray(a.sum(axis=1)).ravel()
    if name == "watts_strogatz":
        assert degrees.mean() == pytest.approx(deg)  # rewiring keeps the edge count
    else:
        assert np.all(degrees == deg)


def test_random_topology_mean_degree_and_time_variation():
    t = Topology("random", M, seed=20)
    degs = [np.asarray(t.graph(r).sum(axis=1)).ravel().mean() for r in range(10)]
    # each node picks 9 of 100 ids without replacement; the self pick is dropped:
    # expected degree = 9 * 99/100
    assert np.mean(degs) == pytest.approx(9 * 99 / 100, abs=0.3)
    assert (t.graph(0) != t.graph(1)).nnz > 0  # redrawn every round
    again = Topology("random", M, seed=20)
    assert (again.graph(5) != t.graph(5)).nnz == 0  # seeded
    assert (Topology("random", M, seed=21).graph(5) != t.graph(5)).nnz > 0
    er = Topology("erdos_renyi", M, seed=1)
    assert er.time_varying and (er.graph(0) != er.graph(1)).nnz > 0
    assert not Topology("watts_strogatz", M, seed=1).time_varying


@pytest.mark.parametrize("name", ["ring", "grid", "exponential", "exponential_sym", "full", "erdos_renyi", "watts_strogatz", "random"])
@pytest.mark.parametrize("weights", ["auto", "metropolis_hastings", "uniform"])
def test_generated_W_properties(name, weights):
    top = Topology(name, 30, seed=7)
    a = top.graph(0)
    directed = name == "exponential"
    if weights == "metropolis_hastings" and directed:
        with pytest.raises(MixingError, match="undirected"):
            mixing_matrix(a, weights)
        return
    regular = top.is_regular(0)
    allow_row = weights == "uniform" and not regular
    W = mixing_matrix(a, weights, allow_row_stochastic=allow_row, allow_disconnected=True).toarray()
    assert (W >= 0).all()
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)
    assert (np.diag(W) > 0).all()
    A = a.toarray()
    off = ~np.eye(30, dtype=bool)
    assert np.all(W[off & (A == 0)] == 0)  # no weight on non-edges
    if not allow_row:
        np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
        if not directed:
            np.testing.assert_allclose(W, W.T, atol=1e-15)


def test_uniform_weights_on_irregular_graph_rejected_without_flag():
    a = Topology("random", 30, seed=2).graph(0)
    assert not Topology("random", 30, seed=2).is_regular(0)
    with pytest.raises(MixingError, match="not doubly stochastic"):
        mixing_matrix(a, "uniform")
    W = mixing_matrix(a, "uniform", allow_row_stochastic=True)
    assert not is_doubly_stochastic(W)


def test_disconnected_graph_rejected():
    a = sp.csr_matrix(np.kron(np.eye(2), np.ones((3, 3)) - np.eye(3)))  # two triangles
    with pytest.raises(MixingError, match="disconnected .*2 components"):
        mixing_matrix(a)
    W = mixing_matrix(a, allow_disconnected=True)
    assert second_eigenvalue_modulus(W) == pytest.approx(1.0)  # no consensus: gap 0
    er = Topology("erdos_renyi", 40, seed=0, p=0.0)
    with pytest.raises(MixingError, match="disconnected"):
        mixing_matrix(er.graph(0))
    # isolated nodes keep w_ii = 1 under MH
    W = mixing_matrix(er.graph(0), allow_disconnected=True)
    np.testing.assert_allclose(W.toarray(), np.eye(40))


def test_bad_topology_arguments():
    with pytest.raises(ValueError, match="unknown topology"):
        Topology("hypercube", 8)
    with pytest.raises(ValueError, match="does not take"):
        Topology("ring", 8, p=0.3)
    with pytest.raises(ValueError, match="positive divisor"):
        Topology("grid", 10, rows=3).graph(0)
    with pytest.raises(ValueError, match="even"):
        Topology("watts_strogatz", 10, k=3).graph(0)


def test_random_code_draws_the_official_codes_graphs():
    # spec section 3: per round t, np.random.seed(seed + t); node i picks k - 1 indices without
    # replacement; the upper triangle of the pick matrix is mirrored
    import numpy as np

    from flwr_strategies.decentralized import Topology

    m, k, seed = 12, 4, 20
    top = Topology("random_code", m, seed=seed, neighbours=k)
    for t in (0, 3):
        np.random.seed(seed + t)
        A = np.zeros((m, m))
        for i in range(m):
            A[i, np.random.choice(m, k - 1, replace=False)] = 1.0
            A[i, i] = 0
        B = np.triu(A)
        B = B + B.T
        np.testing.assert_array_equal(top.graph(t).toarray(), (B > 0).astype(float))
    assert top.time_varying
