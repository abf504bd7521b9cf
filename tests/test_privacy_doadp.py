"""Oracles 13-20 of the DO-ADP spec: Theorem 1 accountant, floor, modes, batch, validation."""

import math
import warnings

import pytest

from flwr_strategies.privacy import (
    doadp_crosscheck,
    doadp_privacy,
    doadp_sigma,
    doadp_sigma_components,
    noise_variance_ratio,
    spent_epsilon,
    subsampled_gaussian_epsilon,
)

pytestmark = pytest.mark.filterwarnings("ignore:DO-ADP accountant")

LR = dict(T=120000, d=2000, q=20000, G=1.0)


@pytest.mark.parametrize(
    "p,kd,delta0,sig_thm,sig_floor,dtilde",
    [
        (1.0, 1.0, 1e-5, 75.0554, 21.6666, 0.7002),
        (0.8, 1.0, 1e-5, 60.0443, 21.6666, 0.6188),
        (1.0, 0.3, 1e-5, 41.1095, 11.8673, 0.7002),
        (0.8, 0.3, 1e-5, 32.8876, 11.8673, 0.6188),
        (1.0, 1.0, 1e-8, 94.5993, 27.3085, 0.005666),
        (0.8, 1.0, 1e-8, 75.6795, 27.3085, 0.005427),
        (1.0, 0.3, 1e-8, 51.8142, 14.9575, 0.005666),
        (0.8, 0.3, 1e-8, 41.4514, 14.9575, 0.005427),
    ],
)
def test_logreg_table_vectors(p, kd, delta0, sig_thm, sig_floor, dtilde):
    k = int(round(kd * LR["d"]))
    comp = doadp_sigma_components(0.01, delta0, p=p, k=k, **LR)
    assert comp["sigma_thm"] == pytest.approx(sig_thm, rel=1e-5)
    assert comp["sigma_floor"] == pytest.approx(sig_floor, rel=1e-5)
    sigma = doadp_sigma(0.01, delta0, p=p, k=k, **LR)
    assert sigma == comp["sigma_thm"]
    rep = doadp_privacy(sigma, delta0, p=p, k=k, **LR)
    assert rep.delta_tilde == pytest.approx(dtilde, rel=2e-3)
    assert rep.S == pytest.approx(2e-5, rel=1e-9)
    assert rep.eps_prime_t == pytest.approx(1.291e-5, rel=1e-3)
    assert rep.eps_tilde == pytest.approx(0.0072678, rel=1e-5)


GENERIC = [
    # eps, delta0, T, p, k, d, q, G, sigma_thm, T_min, floor, eps_t, eps'_t, eps~, delta~
    (0.5, 1e-6, 10000, 0.8, 30, 100, 100, 2.0, 83.067920, 976.56, 25.958725, 0.13975425, 0.00223607, 0.41238953, 0.22979317),
    (1.0, 1e-5, 5000, 1.0, 100, 100, 100, 1.0, 30.641239, 2500, 21.666628, 0.31622777, 0.00632456, 0.92477905, 0.47417344),
    (0.1, 1e-8, 2000, 0.5, 10, 1000, 50, 1.0, 24.425445, 25, 2.730848, 0.05, 0.001, 0.07447791, 0.04473091),
]


@pytest.mark.parametrize("row", GENERIC)
def test_generic_vectors(row):
    eps, d0, T, p, k, d, q, G, s_thm, t_min, floor, e_t, e_p, e_til, d_til = row
    comp = doadp_sigma_components(eps, d0, T, p, k, d, q, G)
    assert comp["sigma_thm"] == pytest.approx(s_thm, rel=1e-6)
    assert comp["T_min"] == pytest.approx(t_min, rel=1e-4)
    assert comp["sigma_floor"] == pytest.approx(floor, rel=1e-6)
    rep = doadp_privacy(s_thm, d0, T, p, k, d, q, G)
    assert rep.eps_t == pytest.approx(e_t, rel=1e-6)
    assert rep.eps_prime_t == pytest.approx(e_p, rel=1e-5)
    assert rep.eps_tilde == pytest.approx(e_til, rel=1e-6)
    assert rep.delta_tilde == pytest.approx(d_til, rel=1e-6)
    assert rep.valid


def test_exact_amplification_vector_and_ordering():
    rep = doadp_privacy(83.067920, 1e-6, 10000, 0.8, 30, 100, 100, 2.0, amplification="exact")
    assert rep.eps_prime_t == pytest.approx(0.00119921, rel=1e-5)
    assert rep.eps_tilde == pytest.approx(0.20873162, rel=1e-6)
    for row in GENERIC:  # oracle 18
        eps, d0, T, p, k, d, q, G, s_thm = row[:9]
        lin = doadp_privacy(s_thm, d0, T, p, k, d, q, G).eps_tilde
        ex = doadp_privacy(s_thm, d0, T, p, k, d, q, G, amplification="exact").eps_tilde
        assert ex <= lin


BASE = dict(epsilon=0.5, delta0=1e-6, T=10000, p=0.8, k=30, d=100, q=100, G=2.0)


def _thm(**over):
    return doadp_sigma_components(**{**BASE, **over})["sigma_thm"]


def test_monotonicity_and_proportionality():  # oracle 13
    s0 = _thm()
    assert _thm(epsilon=0.6) < s0 and _thm(q=200) < s0 and _thm(d=200) < s0 and _thm(delta0=1e-5) < s0
    assert _thm(T=20000) > s0 and _thm(p=0.9) > s0 and _thm(k=40) > s0 and _thm(G=3.0) > s0
    assert _thm(epsilon=1.0) == pytest.approx(s0 / 2, rel=1e-12)
    assert _thm(T=40000) == pytest.approx(2 * s0, rel=1e-12)
    # doadp_sigma (with floor) is monotone too, over a grid crossing the floor
    sig = [doadp_sigma(e, 1e-5, 2000, 0.8, 400, 1000, 3000, 1.0, batch_size=32) for e in (0.2, 0.5, 0.8, 1.0)]
    assert all(a >= b for a, b in zip(sig, sig[1:]))
    sig_T = [doadp_sigma(0.8, 1e-5, T, 1.0, 400, 1000, 3000, 1.0, batch_size=32) for T in (500, 2000, 8000)]
    assert all(a <= b for a, b in zip(sig_T, sig_T[1:]))


@pytest.mark.parametrize("p,k", [(0.8, 100), (1.0, 30), (0.8, 30), (0.5, 1), (0.65, 77)])
def test_variance_ratio(p, k):  # oracle 14
    ratio = (_thm(p=p, k=k) / _thm(p=1.0, k=100)) ** 2
    assert ratio == pytest.approx(p**2 * k / 100, rel=1e-12)
    assert ratio == pytest.approx(noise_variance_ratio(p, k, 100), rel=1e-12)


def test_paper_chain_identities_at_sigma_thm():  # oracle 16
    for eps, d0, T, p, k, d, q, G in [(0.3, 1e-6, 50000, 0.9, 7, 50, 200, 1.5), (1.0, 1e-5, 5000, 1.0, 100, 100, 100, 1.0)]:
        s = doadp_sigma(eps, d0, T, p, k, d, q, G, strict=True)
        rep = doadp_privacy(s, d0, T, p, k, d, q, G)
        assert rep.S == pytest.approx(eps**2 / 5, rel=1e-10)
        assert rep.eps_tilde == pytest.approx(eps * math.sqrt(2 * math.log(math.e + 1) / 5) + eps**2 / 5, rel=1e-10)
        assert rep.eps_tilde <= eps
        assert rep.delta_tilde == pytest.approx(1 - (1 - eps / math.sqrt(5)) * (1 - p * d0) ** T, rel=1e-10)


def test_floor_and_strict():  # oracle 17
    args = dict(epsilon=1.0, delta0=1e-5, p=0.8, k=400, d=1000, q=3000, G=1.0, batch_size=32)
    for T in (100, 1000, 2000, 5000):
        comp = doadp_sigma_components(T=T, **args)
        assert (comp["sigma_thm"] >= comp["sigma_floor"]) == (T >= comp["T_min"])
    comp = doadp_sigma_components(T=1000, **args)
    assert not comp["theorem_applies"]
    with pytest.raises(ValueError, match="T >= q"):
        doadp_sigma(T=1000, strict=True, **args)
    s = doadp_sigma(T=1000, **args)
    assert s == comp["sigma_floor"]
    rep = doadp_privacy(s, 1e-5, 1000, 0.8, 400, 1000, 3000, 1.0, batch_size=32)
    assert rep.valid and rep.eps_tilde <= 1.0


def test_conservative_equals_paper_with_p1_kd_and_l2():  # oracle 19
    for clip in ("coordinate", "l2"):
        c = doadp_sigma(mode="conservative", clip_mode=clip, **BASE)
        ref = doadp_sigma(**{**BASE, "p": 1.0, "k": 100})
        assert c == pytest.approx(ref, rel=1e-12)
        rc = doadp_privacy(50.0, 1e-6, 10000, 0.8, 30, 100, 100, 2.0, mode="conservative")
        rp = doadp_privacy(50.0, 1e-6, 10000, 1.0, 100, 100, 100, 2.0)
        assert rc.eps_tilde == pytest.approx(rp.eps_tilde, rel=1e-12)
        assert rc.delta_tilde == pytest.approx(rp.delta_tilde, rel=1e-12)
    # l2 clipping forces k_eff = d in paper mode
    assert doadp_sigma(clip_mode="l2", **BASE) == pytest.approx(doadp_sigma(**{**BASE, "k": 100}), rel=1e-12)
    # conservative formula sigma^2 = 160 T ln(1.25/delta0) G^2 / (q^2 eps^2)
    c = doadp_sigma_components(mode="conservative", **BASE)["sigma_thm"]
    assert c**2 == pytest.approx(160 * 10000 * math.log(1.25e6) * 4 / (100**2 * 0.25), rel=1e-12)


def test_batch_extension():  # oracle 20
    args = dict(epsilon=0.9, delta0=1e-5, T=2000, p=0.8, k=400, d=1000, q=3000, G=1.0)
    c1 = doadp_sigma_components(batch_size=1, **args)
    for b in (2, 8, 32):
        cb = doadp_sigma_components(batch_size=b, **args)
        assert cb["sigma_thm"] == pytest.approx(c1["sigma_thm"], rel=1e-12)
        assert cb["sigma_floor"] == pytest.approx(c1["sigma_floor"] / b, rel=1e-12)
        assert cb["T_min"] == pytest.approx(c1["T_min"] / b**2, rel=1e-12)
    with pytest.raises(ValueError, match="p\\*batch_size/q"):
        doadp_sigma(0.5, 1e-5, 100, 1.0, 10, 10, 10, 1.0, batch_size=11)


def test_spec_cnn_sigma_table():  # spec 5.3 placeholder table
    table = {
        1.0: [0.6771, 0.6771, 0.4282, 0.4282],
        0.9: [0.7177, 0.6771, 0.4539, 0.4282],
        0.8: [0.8075, 0.6771, 0.5107, 0.4282],
    }
    d = 10000
    for eps, row in table.items():
        for (p, kd), want in zip([(1, 1), (0.8, 1), (1, 0.4), (0.8, 0.4)], row):
            s = doadp_sigma(eps, 1e-5, 2000, p, int(kd * d), d, 3000, 1.0, batch_size=32)
            assert s == pytest.approx(want, abs=6e-5)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-0.1), "epsilon"),
        (dict(epsilon=1.5), "epsilon=1.5"),
        (dict(delta0=0.0), "delta0"),
        (dict(delta0=1.0), "delta0 must be < 1, got 1.0"),
        (dict(delta0=-1e-5), "delta0"),
        (dict(p=0.3), "p=0.3"),
        (dict(p=1.2), "p must be <= 1, got 1.2"),
        (dict(k=0), "k must be an integer >= 1, got 0"),
        (dict(k=101), r"k must be in \[1, d\] = \[1, 100\], got 101"),
        (dict(G=0.0), "G must be > 0, got 0.0"),
        (dict(G=-1.0), "G must be > 0, got -1.0"),
        (dict(q=0), "q must be an integer >= 1, got 0"),
        (dict(T=0), "T must be an integer >= 1, got 0"),
        (dict(mode="weird"), "mode"),
    ],
)
def test_validation_names_the_value(kw, match):
    with pytest.raises(ValueError, match=match):
        doadp_sigma(**{**BASE, **kw})


def test_low_p_allowed_with_flag():
    s = doadp_sigma(**{**BASE, "p": 0.24}, allow_low_p=True)
    assert s > 0


def test_privacy_validity_flags_and_spent_epsilon():
    rep = doadp_privacy(0.01, 1e-5, 1000, 1.0, 100, 100, 10, 1.0)
    assert not rep.valid and rep.reasons
    kw = dict(delta0=1e-6, p=0.8, k=30, d=100, q=100, G=2.0)
    spent = [spent_epsilon(83.06792, t, **kw) for t in (1, 10, 100, 1000, 10000)]
    assert all(a < b for a, b in zip(spent, spent[1:]))
    assert spent[-1] == pytest.approx(0.41238953, rel=1e-6)


def test_crosscheck_dp_accounting():
    out = doadp_crosscheck(83.06792, 1e-6, 10000, 0.8, 30, 100, 100, 2.0, delta=1e-3)
    # the paper's credits (rate p b/q, sensitivity 2G sqrt(k/d)/b) are worth a smaller epsilon than what
    # is certified without them; the certified number is the library's (GaussianSteps) one
    assert 0 < out["rdp_paper_claim_eps"] < out["certified_eps"]
    from flwr_strategies.privacy import GaussianSteps

    assert out["certified_eps"] == GaussianSteps(83.06792, 2.0, 1, 100).epsilon(10000, 1e-3)
    # standard accountant: monotone in noise and in steps
    e1 = subsampled_gaussian_epsilon(1.0, 0.01, 1000, 1e-5)
    assert subsampled_gaussian_epsilon(2.0, 0.01, 1000, 1e-5) < e1 < subsampled_gaussian_epsilon(1.0, 0.01, 4000, 1e-5)
    # RDP and PLD agree to within a factor (PLD is tighter)
    ep = subsampled_gaussian_epsilon(1.0, 0.01, 1000, 1e-5, accountant="pld")
    assert 0.5 * e1 < ep <= e1 * 1.01
