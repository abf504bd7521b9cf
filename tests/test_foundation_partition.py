import numpy as np
import pytest

from flwr_strategies.simulations import partition as P


def _labels(n_per_class=60, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.permutation(np.repeat(np.arange(classes), n_per_class))


def _skew(labels, parts):
    """Mean total-variation distance between client label distributions and the global one."""
    glob = np.bincount(labels, minlength=10) / len(labels)
    return float(np.mean([0.5 * np.abs(np.bincount(labels[p], minlength=10) / len(p) - glob).sum() for p in parts]))


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "dirichlet-class", "pathological", "label-count"])
def test_every_sample_assigned_exactly_once(kind):
    labels = _labels()
    parts = P.make_partition(kind, labels, 10, seed=3, alpha=0.3, classes_per_client=2)
    assert len(parts) == 10
    allidx = np.concatenate(parts)
    if kind in ("dirichlet", "pathological"):  # equal quotas: len // n each, remainder unassigned
        assert len(allidx) == (len(labels) // 10) * 10
    else:
        assert len(allidx) == len(labels)
    assert len(np.unique(allidx)) == len(allidx)
    assert all(len(p) > 0 for p in parts)


def test_partitions_are_seeded():
    labels = _labels()
    for kind in ("iid", "dirichlet", "dirichlet-class", "pathological"):
        a = P.make_partition(kind, labels, 10, seed=7, alpha=0.3)
        b = P.make_partition(kind, labels, 10, seed=7, alpha=0.3)
        c = P.make_partition(kind, labels, 10, seed=8, alpha=0.3)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize("kind", ["dirichlet", "dirichlet-class"])
def test_dirichlet_skew_grows_as_alpha_shrinks(kind):
    labels = _labels(100)
    iid = _skew(labels, P.make_partition("iid", labels, 10, seed=0))
    mild = _skew(labels, P.make_partition(kind, labels, 10, seed=0, alpha=10.0))
    strong = _skew(labels, P.make_partition(kind, labels, 10, seed=0, alpha=0.1))
    assert iid < 0.2 and iid < strong
    assert strong > mild + 0.2
    assert strong > 0.5


def test_dirichlet_client_prior_gives_equal_sizes():
    labels = _labels()
    parts = P.dirichlet_client_prior(labels, 12, 0.3, np.random.default_rng(0))
    assert {len(p) for p in parts} == {len(labels) // 12}


def test_refill_mode_reuses_samples_of_exhausted_classes():
    labels = np.repeat(np.arange(2), [10, 190])  # class 0 runs out quickly
    prior_heavy = P.dirichlet_client_prior(labels, 4, 0.05, np.random.default_rng(1), refill=True)
    assert sum(len(p) for p in prior_heavy) == 200


def test_pathological_clients_hold_k_classes():
    labels = _labels()
    strict = P.dirichlet_client_prior(labels, 10, 1.0, np.random.default_rng(0), classes_per_client=2, refill=True)
    for p in strict:
        assert len(np.unique(labels[p])) <= 2
    # without refill, a client whose classes ran out takes leftovers: most samples still in its 2 classes
    parts = P.pathological(labels, 10, 2, np.random.default_rng(0))
    top2 = [np.sort(np.bincount(labels[p], minlength=10))[-2:].sum() / len(p) for p in parts]
    assert np.mean(top2) > 0.6  # IID would give about 0.25


def test_label_count_is_cyclic_and_balanced():
    labels = _labels()
    parts = P.label_count(labels, 10, 3, np.random.default_rng(0))
    held = [tuple(np.unique(labels[p])) for p in parts]
    assert held[0] == (0, 1, 2) and held[1] == (3, 4, 5) and held[3] == (0, 1, 9)
    holders = np.bincount(np.concatenate([list(h) for h in held]), minlength=10)
    assert set(holders) == {3}


def test_infeasible_requests_are_rejected():
    labels = _labels(2)  # 20 samples
    with pytest.raises(ValueError, match="more clients than samples"):
        P.iid(labels, 21, np.random.default_rng(0))
    with pytest.raises(ValueError, match="exceeds"):
        P.dirichlet_per_class(labels, 5, 0.5, 0, min_size=5)
    with pytest.raises(ValueError, match="classes_per_client"):
        P.pathological(labels, 4, 11, np.random.default_rng(0))
    with pytest.raises(ValueError, match="alpha"):
        P.dirichlet_client_prior(labels, 4, 0.0, np.random.default_rng(0))
    with pytest.raises(KeyError, match="valid partitions"):
        P.make_partition("zipf", labels, 2, 0)
    with pytest.raises(ValueError, match="could not give"):
        P.dirichlet_per_class(_labels(3), 10, 0.01, 0, min_size=3)
