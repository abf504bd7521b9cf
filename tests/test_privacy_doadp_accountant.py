"""The epsilon DO-ADP reports comes from a standard accountant over the mechanism that runs, always
with its delta, never below dp_accounting's tightest value at that delta and within 1% of it (issue 13,
privacy done-when 2; issue 21, done-when 1: the paper's settings included)."""

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from flwr_strategies.doadp.config import DOADPConfig
from flwr_strategies.doadp.server import DOADPServer
from flwr_strategies.privacy import GaussianSteps, calibrate_sigma, doadp_privacy, doadp_sigma

REL = dp_accounting.NeighboringRelation.REPLACE_ONE
#: the library's value may exceed the tightest reference by this much (issue 21 allows 5%)
TIGHT = 1.01
#: ... and fall below it by at most this much: the reference resolves the best order to 0.01 below 16 and
#: to integers above, the library's fractional orders may sit between its grid points
BELOW = 1e-5


#: dp_accounting's bound for sampling without replacement is exact up to this order and much looser above
EXACT_MAX = 256


def dense_orders(top: float = 2**14, ratio: float = 1.1) -> list[float]:
    """dp_accounting's default orders, the last order of its exact bound (256, where the optimum often
    sits) and its neighbours, plus a geometric grid of ratio ``ratio`` from 16 to ``top``."""
    orders = set(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS) | {EXACT_MAX - 1.0, float(EXACT_MAX), EXACT_MAX + 1.0}
    o = 16.0
    while o < top:
        orders.add(float(round(o)))
        o *= ratio
    return sorted(orders)


def _rdp(event, delta, orders):
    acc = rdp.RdpAccountant(orders=orders, neighboring_relation=REL)
    acc.compose(event)
    return acc.get_epsilon_and_optimal_order(delta)


def _near(order: float) -> list[float]:
    """Every order within 12% of ``order``: step 0.01 below 16, every integer above."""
    if order < 16:
        return [max(1.01, order - 1.2) + j / 100 for j in range(241)]
    return [float(o) for o in range(round(order / 1.12), round(order * 1.12) + 1)]


def tightest_rdp(event, delta, top: float = 2**14):
    """dp_accounting's RDP epsilon at its best order: a dense grid, then every order near the best one, on
    each side of order 256 (the bound of sampling without replacement changes form there and each side
    has its own optimum)."""
    orders = dense_orders(top)
    best = math.inf
    for side in ([o for o in orders if o <= EXACT_MAX], [o for o in orders if o > EXACT_MAX]):
        eps, order = _rdp(event, delta, side)
        assert order < orders[-1] / 1.1, "the reference's best order is at its edge: widen it"
        near = [o for o in _near(order) if (o <= EXACT_MAX) == (order <= EXACT_MAX)]
        best = min(best, eps, _rdp(event, delta, near)[0])
    return best


def reference_epsilon(sigma, G, b, q, T, delta, sampling):
    """dp_accounting's tightest value, straight from its own API, independent of the library: RDP at its
    best order (sampling without replacement), or the smallest pessimistic PLD over grids from 1e-4 down
    to the library's or finer (Poisson): a ladder of half decades, whose first step at or below the
    library's target grid (2e-4 x epsilon) is 1 to 3.3 times finer than that target."""
    if sampling == "uniform":
        event = dp_accounting.SampledWithoutReplacementDpEvent(q, b, dp_accounting.GaussianDpEvent(sigma * b / (2 * G)))
        return tightest_rdp(dp_accounting.SelfComposedDpEvent(event, T), delta)
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(b / q, dp_accounting.GaussianDpEvent(sigma * b / G)), T)
    out = []
    for grid in (1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7):  # down to the library's grid (2e-4 x epsilon) or finer
        acc = pld.PLDAccountant(neighboring_relation=REL, value_discretization_interval=grid)
        acc.compose(event)
        out.append(acc.get_epsilon(delta))
        if grid <= min(out) * 2e-4:
            break
    return min(out)


# sampling, q, b, T, d, p, k_frac, epsilon, delta0, calibration   (G = 1, delta = 1e-5)
LOGREG = (20000, 1, 120000, 2000)  # Huo et al. Sec. V-A: q = 400,000 / 20 agents, one sample per step, 6 epochs
CNN = (3000, 32, 2000, 37514)  # Sec. V-B: q = 60,000 / 20; b, T and the CNN's d are the spec's choices
SETTINGS = [
    # Fig. 2a/3, epsilon 0.01, delta0 1e-8: the four configurations (p, k/d)
    *[("uniform", *LOGREG, p, kf, 0.01, 1e-8, "theorem1") for p, kf in [(1.0, 1.0), (0.8, 1.0), (1.0, 0.3), (0.8, 0.3)]],
    ("poisson", *LOGREG, 0.8, 0.3, 0.01, 1e-8, "theorem1"),
    # Table II, the four configurations at epsilon 1 and the communication-saving ones at 0.9, 0.8
    *[("uniform", *CNN, p, kf, 1.0, 1e-5, "theorem1") for p, kf in [(1.0, 1.0), (0.8, 1.0), (1.0, 0.4), (0.8, 0.4)]],
    ("poisson", *CNN, 1.0, 0.4, 0.9, 1e-5, "theorem1"),
    ("poisson", *CNN, 0.8, 0.4, 0.8, 1e-5, "theorem1"),
    # small settings
    ("uniform", 71, 8, 60, 300, 1.0, 1.0, 1.0, 1e-5, "theorem1"),
    ("uniform", 100, 1, 300, 50, 0.5, 0.3, 0.5, 1e-6, "accountant"),  # b = 1, the paper's draw
    ("poisson", 1000, 16, 150, 200, 0.8, 0.4, 2.0, 1e-5, "accountant"),
    ("poisson", 500, 10, 100, 100, 0.9, 0.1, 0.8, 1e-7, "theorem1"),
]


def _server(sampling, q, b, T, d, p, kf, eps, delta0, cal):
    cfg = DOADPConfig(epsilon=eps, delta=1e-5, delta0=delta0, p=p, k_frac=kf, sampling=sampling, calibration=cal,
                      allow_low_p=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DOADPServer([np.zeros(d, np.float32)], num_partitions=4, num_rounds=T, dataset_size=q, batch_size=b,
                           config=cfg)


@pytest.mark.parametrize("setting", SETTINGS)
def test_reported_epsilon_is_dp_accountings_tightest(setting):
    sampling, q, b, T, d, p, kf, eps, delta0, cal = setting
    core = _server(*setting)  # starts: the noise certifies the target
    rep = core.guarantee(T)
    assert rep["dp_delta"] == 1e-5  # always reported with its delta
    ref = reference_epsilon(core.sigma, 1.0, b, q, T, 1e-5, sampling)
    assert rep["dp_epsilon"] >= ref * (1 - BELOW)  # never below dp_accounting's own value
    assert rep["dp_epsilon"] <= ref * TIGHT  # and within 1% of its tightest
    assert rep["dp_epsilon"] <= eps * (1 + 1e-9)  # the target holds
    # Theorem 1's bound is reported beside it, labelled, with its own delta
    assert {"theorem1_epsilon", "theorem1_delta"} <= set(rep)
    # the per-round metric of the last round is the same certified number
    m = core.aggregate_train(T, [], [])
    assert m["dp_epsilon"] == rep["dp_epsilon"] and m["dp_delta"] == 1e-5


def test_paper_logistic_regression_setting_starts():
    # issue 21: with RDP orders up to 128 this certified 0.0446 > 0.01 and DO-ADP refused to start
    for p, kf in [(1.0, 1.0), (0.8, 0.3)]:
        core = _server("uniform", *LOGREG, p, kf, 0.01, 1e-8, "theorem1")
        assert core.sigma == doadp_sigma(0.01, 1e-8, 120000, p, round(kf * 2000), 2000, 20000, 1.0)  # the paper's noise
        assert core.planned_epsilon <= 0.01
        # what orders up to 128 certify for the same noise (the old refusal), for the record
        old = rdp.RdpAccountant(orders=[o for o in dense_orders() if o <= 128], neighboring_relation=REL)
        old.compose(core.mechanism().event(120000))
        assert old.get_epsilon(1e-5) > 0.04


def test_orders_extend_beyond_the_first_set():
    # a Gaussian without subsampling (b = q) at tiny epsilon: the best order is about 50,000, far above the
    # first set's 4,096; dp_accounting's bound is closed-form there, so a dense reference is cheap
    mech = GaussianSteps(2e4, 1.0, 10, 10)
    eps = mech.epsilon(1, 1e-5)
    order = _rdp(mech.event(1), 1e-5, dense_orders(2**20))[1]
    assert 8192 < order < 2**19
    ref = tightest_rdp(mech.event(1), 1e-5, 2**20)
    assert ref * (1 - BELOW) <= eps <= ref * TIGHT


def test_paper_credits_can_fall_below_the_standard_accountant():
    # issue 13's example: q=3000, d=20000, k/d=0.005, p=0.5, a meaningful delta_hat
    q, d, k, p, T, b, G, delta = 3000, 20000, 100, 0.5, 3000, 1, 1.0, 1e-5
    sigma = doadp_sigma(0.5, 1e-9, T, p, k, d, q, G, allow_low_p=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paper = doadp_privacy(sigma, 1e-9, T, p, k, d, q, G, delta_hat=1e-6, allow_low_p=True)
    certified = GaussianSteps(sigma, G, b, q).epsilon(T, paper.delta_tilde)
    assert paper.eps_tilde < certified  # the paper's credits report less than is certified
    # DO-ADP therefore refuses Theorem 1's noise for a target the accountant does not certify ...
    with pytest.raises(ValueError, match="above the target epsilon"):
        DOADPServer([np.zeros(d, np.float32)], num_partitions=2, num_rounds=T, dataset_size=q, batch_size=b,
                    config=DOADPConfig(epsilon=0.5, delta=1e-8, p=p, k_frac=k / d, delta0=1e-9, allow_low_p=True))
    # ... and calibrates it with the accountant instead
    core = DOADPServer([np.zeros(d, np.float32)], num_partitions=2, num_rounds=T, dataset_size=q, batch_size=b,
                       config=DOADPConfig(epsilon=0.5, delta=1e-8, p=p, k_frac=k / d, calibration="accountant",
                                          allow_low_p=True))
    eps = core.guarantee(T)["dp_epsilon"]
    ref = reference_epsilon(core.sigma, G, b, q, T, 1e-8, "uniform")
    assert eps <= 0.5 and ref * (1 - BELOW) <= eps <= ref * TIGHT


@pytest.mark.parametrize("sampling, target", [
    ("uniform", (1.0, 80, 16, 800)), ("poisson", (1.0, 80, 16, 800)),
    ("uniform", (0.01, 120000, 1, 20000)),  # the paper's logistic regression (sigma 30 instead of Theorem 1's 95)
])
def test_calibration_is_tight_and_certified(sampling, target):
    eps, T, b, q = target
    s = calibrate_sigma(eps, 1e-5, T, 1.0, b, q, sampling)
    assert GaussianSteps(s, 1.0, b, q, sampling).epsilon(T, 1e-5) <= eps
    assert GaussianSteps(s * 0.99, 1.0, b, q, sampling).epsilon(T, 1e-5) > eps


def test_accountant_noise_is_smaller_than_theorem1():
    # what tight accounting buys at the spec's CNN setting (same epsilon, delta; no credit for p, k/d)
    thm = doadp_sigma(1.0, 1e-5, 2000, 0.8, 4000, 10000, 3000, 1.0, batch_size=32)
    acc = calibrate_sigma(1.0, 1e-5, 2000, 1.0, 32, 3000, "poisson")
    assert acc < thm / 2
    assert math.isfinite(acc) and acc > 0


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_composed_mechanisms_are_certified_as_tightly(sampling):
    from flwr_strategies.privacy import composed_certified_epsilon

    a, b = GaussianSteps(3.0, 1.0, 8, 400, sampling), GaussianSteps(5.0, 1.0, 8, 300, sampling)
    # one mechanism, in pieces: exactly certified_epsilon
    assert composed_certified_epsilon([(a, 30), (a, 70)], 1e-5) == a.epsilon(100, 1e-5)
    assert composed_certified_epsilon([(a, 0)], 1e-5) == 0.0
    eps = composed_certified_epsilon([(a, 60), (b, 40)], 1e-5)
    # dp_accounting on the same composed event, straight from its API
    event = dp_accounting.ComposedDpEvent([a.event(60), b.event(40)])
    if sampling == "uniform":
        ref = tightest_rdp(event, 1e-5)
    else:
        acc = pld.PLDAccountant(neighboring_relation=REL, value_discretization_interval=1e-5)
        acc.compose(event)
        ref = acc.get_epsilon(1e-5)
    assert ref * (1 - BELOW) <= eps <= ref * TIGHT
    assert a.epsilon(60, 1e-5) < eps < a.epsilon(60, 1e-5) + b.epsilon(40, 1e-5)  # composition, not the sum
    with pytest.raises(ValueError, match="different accountants"):
        composed_certified_epsilon([(a, 1), (GaussianSteps(3.0, 1.0, 8, 400, "uniform" if sampling == "poisson"
                                                          else "poisson"), 1)], 1e-5)


def random_settings(n: int = 30, seed: int = 26):
    """``n`` settings drawn (seeded) across the documented ranges: two thirds sampling without replacement
    (RDP, where the order search matters), one third Poisson (PLD); q records in [20, 20000], batch b in
    [1, min(64, q)], T steps in [10, 5000], noise multiplier of the accountant's event in [0.6, 8] (epsilons
    from about 1e-3 to 1e3), delta in [1e-8, 1e-4]; all log-uniform."""
    rng = np.random.default_rng(seed)

    def logu(lo, hi):
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    out = []
    for i in range(n):
        sampling = ("uniform", "uniform", "poisson")[i % 3]
        q = int(round(logu(20, 20000)))
        b = int(round(logu(1, min(64, q))))
        T = int(round(logu(10, 5000)))
        z = logu(0.6, 8.0)
        sigma = z * (2.0 if sampling == "uniform" else 1.0) / b  # G = 1 (see GaussianSteps.noise_multiplier)
        out.append((sampling, sigma, b, q, T, logu(1e-8, 1e-4)))
    return out


@pytest.mark.parametrize("sampling, sigma, b, q, T, delta", random_settings())
def test_certified_epsilon_is_tight_on_random_settings(sampling, sigma, b, q, T, delta):
    """Issue 26: within 1% above dp_accounting's tightest value, never below, away from the pinned settings
    too (the order search used to jump from 128 to 362 past 256, where the bound of sampling without
    replacement changes form, and reported up to 11% more)."""
    eps = GaussianSteps(sigma, 1.0, b, q, sampling).epsilon(T, delta)
    ref = reference_epsilon(sigma, 1.0, b, q, T, delta, sampling)
    assert ref * (1 - BELOW) <= eps <= ref * TIGHT


def test_order_256_is_searched():
    # issue 26's example (part A, p = 1, k = d): 0.02936 with the 128 -> 362 gap, 0.02645 at order 256
    mech = GaussianSteps(21.15, 1.0, 8, 1000)
    eps = mech.epsilon(1500, 1e-5)
    at_256 = _rdp(mech.event(1500), 1e-5, [256.0])[0]
    assert eps == pytest.approx(at_256, rel=1e-12) and eps < 0.0265
