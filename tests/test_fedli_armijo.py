"""Oracles O1-O6 and O13 of spec 001 (stochastic Armijo line search) plus constant validation."""

import math

import pytest
import torch
import torch.nn.functional as F

from flwr_strategies.fedli import ArmijoConfig, armijo_local_train, armijo_step, make_closure, reset_step_size

torch.set_num_threads(1)


def _quad_closure(w, a, center=0.0):
    return lambda: 0.5 * a * torch.sum((w - center) ** 2)


class DropMLP(torch.nn.Module):
    def __init__(self, d=8, h=16, k=3):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.drop = torch.nn.Dropout(0.5)
        self.fc2 = torch.nn.Linear(h, k)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def _data(n=96, d=8, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, k, (n,), generator=g)
    return x, y


def _batches(n, b, gen):
    perm = torch.randperm(n, generator=gen)
    return [perm[i : i + b] for i in range(0, n, b)]


# ---------------------------------------------------------------- O2 exact backtracking
def test_o2_exact_backtracking_on_1d_quadratic():
    w = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    cfg = ArmijoConfig(eta_max=1.0, armijo_c=0.1, backtrack_factor=0.9)
    res = armijo_step([w], _quad_closure(w, 4.0), eta=123.0, k=1, config=cfg)
    assert res.accepted and not res.fallback
    assert res.trials == 9 and res.backtracks == 8
    assert res.step_size == pytest.approx(0.9**8, rel=1e-15)
    # the first admissible step below 2(1-c)/a = 0.45 is beta^8
    assert 0.9**8 <= 2 * (1 - 0.1) / 4.0 < 0.9**7
    assert w.item() == pytest.approx(1.0 - 0.9**8 * 4.0, rel=1e-14)
    assert w.item() == pytest.approx(-0.72186884, abs=1e-8)


# ---------------------------------------------------------------- O1 Armijo holds on every accepted step
def test_o1_every_accepted_step_satisfies_armijo_with_dropout():
    torch.manual_seed(0)
    model = DropMLP()
    x, y = _data()
    cfg = ArmijoConfig(armijo_c=0.3, eta_max=5.0)  # large eta_max forces real backtracking
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(1)
    eta, n_accept, n_back = cfg.eta_max, 0, 0
    for k, idx in enumerate(_batches(96, 16, gen) * 3, start=1):
        closure = make_closure(model, x[idx], y[idx], seed=1000 + k)
        before = [p.detach().clone() for p in params]
        res = armijo_step(params, closure, eta, k, cfg, batch_fraction=16 / 96)
        eta = res.step_size
        assert 0 < res.step_size <= cfg.eta_max
        if res.accepted and not res.skipped:
            n_accept += 1
            n_back += res.backtracks
            after = [p.detach().clone() for p in params]
            with torch.no_grad():
                new_loss = float(closure())  # same minibatch, same dropout mask
                for p, b in zip(params, before):
                    p.copy_(b)
                old_loss = float(closure())
                for p, a in zip(params, after):
                    p.copy_(a)
            assert old_loss == pytest.approx(res.loss, rel=1e-6)
            bound = old_loss - cfg.armijo_c * res.step_size * res.grad_norm_sq
            assert new_loss <= bound + 1e-6 * abs(bound)
    assert n_accept >= 10 and n_back > 0


# ---------------------------------------------------------------- O3 step-size bounds
@pytest.mark.parametrize("curv", [0.5, 3.0, 40.0])
def test_o3_step_size_bounds_on_quadratic(curv):
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(5, generator=gen, dtype=torch.float64).requires_grad_(True)
    cfg = ArmijoConfig(reset_option=2)
    eta = cfg.eta_max
    for k in range(1, 15):
        eta_start = reset_step_size(eta, k, cfg, batch_fraction=0.25)
        res = armijo_step([w], _quad_closure(w, curv), eta, k, cfg, batch_fraction=0.25)
        if res.skipped:
            break
        eta = res.step_size
        assert 0 < eta <= cfg.eta_max
        assert eta >= min(eta_start, cfg.backtrack_factor * 2 * (1 - cfg.armijo_c) / curv) - 1e-15


# ---------------------------------------------------------------- O4 reset()
def test_o4_reset_rule():
    for opt in (0, 1, 2):
        cfg = ArmijoConfig(eta_max=0.7, reset_option=opt, growth_factor=2.0)
        assert reset_step_size(0.01, 1, cfg, 0.1) == 0.7
    assert reset_step_size(0.013, 5, ArmijoConfig(reset_option=0), 0.1) == 0.013
    assert reset_step_size(0.013, 5, ArmijoConfig(eta_max=0.7, reset_option=1), 0.1) == 0.7
    cfg2 = ArmijoConfig(eta_max=0.7, reset_option=2, growth_factor=2.0)
    assert reset_step_size(0.1, 3, cfg2, 0.25) == pytest.approx(0.1 * 2.0**0.25, rel=1e-15)
    assert reset_step_size(0.69, 3, cfg2, 0.25) == 0.7  # capped
    uncapped = ArmijoConfig(eta_max=0.7, reset_option=2, cap_at_eta_max=False)
    assert reset_step_size(0.69, 3, uncapped, 0.25) == pytest.approx(0.69 * 2.0**0.25, rel=1e-15)


# ---------------------------------------------------------------- O5 guards
def test_o5_zero_gradient_leaves_model_unchanged():
    w = torch.tensor([2.0, -1.0], dtype=torch.float64, requires_grad=True)
    res = armijo_step([w], _quad_closure(w, 1.0, center=torch.tensor([2.0, -1.0], dtype=torch.float64)), 1.0, 1, ArmijoConfig())
    assert res.skipped and res.trials == 0
    assert w.tolist() == [2.0, -1.0]


def test_o5_fallback_step_when_nothing_accepted():
    w = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    cfg = ArmijoConfig(max_backtracks=2)  # trials 1.0 and 0.9 both fail (need <= 0.45)
    res = armijo_step([w], _quad_closure(w, 4.0), 1.0, 1, cfg)
    assert res.fallback and not res.accepted and res.trials == 2
    assert w.item() == 1.0 - 1e-6 * 4.0
    assert res.step_size == pytest.approx(0.81)  # sls keeps the last reduced value


# ---------------------------------------------------------------- O6 determinism (dropout)
def _run_local(seed):
    torch.manual_seed(123)
    model = DropMLP()
    x, y = _data()
    gen = torch.Generator().manual_seed(seed)
    batches = ((x[i], y[i]) for i in _batches(96, 32, gen))
    stats = armijo_local_train(model, batches, ArmijoConfig(), gen, batch_fraction=32 / 96)
    return [p.detach().clone() for p in model.parameters()], stats


def test_o6_bit_identical_runs_and_global_rng_untouched():
    torch.manual_seed(999)
    state = torch.get_rng_state()
    w1, s1 = _run_local(7)
    torch.set_rng_state(state)
    torch.manual_seed(5)  # scramble the global RNG between runs: must not matter
    w2, s2 = _run_local(7)
    assert s1 == s2
    assert all(torch.equal(a, b) for a, b in zip(w1, w2))
    w3, _ = _run_local(8)
    assert not all(torch.equal(a, b) for a, b in zip(w1, w3))


def test_closure_reuses_same_dropout_mask():
    torch.manual_seed(0)
    model = DropMLP().train()
    x, y = _data()
    closure = make_closure(model, x, y, seed=42)
    a, b = float(closure().detach()), float(closure().detach())
    assert a == b
    other = float(make_closure(model, x, y, seed=43)().detach())
    assert other != a  # dropout is active: another seed gives another mask


def test_local_train_reports_last_step_and_mean_loss():
    torch.manual_seed(0)
    model = DropMLP()
    x, y = _data()
    gen = torch.Generator().manual_seed(0)
    seen = []
    batches = [(x[i], y[i]) for i in _batches(96, 32, gen)]
    stats = armijo_local_train(
        model, batches, ArmijoConfig(), gen, batch_fraction=32 / 96, on_step=lambda k, r: seen.append(r)
    )
    assert stats["steps"] == 3 == len(seen)
    assert stats["step_size"] == seen[-1].step_size
    assert stats["train_loss"] == pytest.approx(sum(r.loss for r in seen) / 3)
    assert stats["n_backtracks"] == sum(r.backtracks for r in seen)


# ---------------------------------------------------------------- O13 heterogeneous counterexample
def test_o13_heterogeneous_convex_counterexample_numbers():
    x_star = 9.0 / 11.0
    cfg = ArmijoConfig(eta_max=1.0, armijo_c=0.1, backtrack_factor=0.9)
    out = []
    for f in (lambda x: 10 * (x - 1) ** 2, lambda x: (x + 1) ** 2):
        w = torch.tensor(x_star, dtype=torch.float64, requires_grad=True)
        res = armijo_step([w], lambda: f(w), 1.0, 1, cfg)
        out.append((w.item(), res.step_size))
    (x1, e1), (x2, e2) = out
    assert x1 == pytest.approx(1.14047, abs=1e-5) and e1 == pytest.approx(0.9**23) and e1 == pytest.approx(0.08863, abs=1e-5)
    assert x2 == pytest.approx(-2.45455, abs=1e-5) and e2 == pytest.approx(0.9)
    f_glob = lambda x: 0.5 * (10 * (x - 1) ** 2 + (x + 1) ** 2)  # noqa: E731
    avg = 0.5 * (x1 + x2)
    assert avg == pytest.approx(-0.65704, abs=1e-5)
    assert f_glob(x_star) == pytest.approx(1.8182, abs=1e-4)
    assert f_glob(avg) == pytest.approx(13.7877, abs=1e-3)
    # each local loss fell, but the global loss rose: descent is NOT guaranteed
    assert 10 * (x1 - 1) ** 2 < 10 * (x_star - 1) ** 2 and (x2 + 1) ** 2 < (x_star + 1) ** 2
    assert f_glob(avg) > f_glob(x_star)


# ---------------------------------------------------------------- bad constants / bad losses
@pytest.mark.parametrize(
    "kw",
    [
        {"armijo_c": 0.0}, {"armijo_c": 1.0}, {"armijo_c": -0.1}, {"armijo_c": float("nan")},
        {"backtrack_factor": 0.0}, {"backtrack_factor": 1.0}, {"backtrack_factor": 1.5},
        {"eta_max": 0.0}, {"eta_max": -1.0}, {"eta_max": float("inf")},
        {"reset_option": 3}, {"max_backtracks": 0}, {"growth_factor": 0.5},
        {"fallback_step": -1.0}, {"grad_tol": float("nan")},
    ],
)
def test_invalid_constants_raise_naming_the_value(kw):
    with pytest.raises(ValueError) as err:
        ArmijoConfig(**kw)
    assert list(kw)[0] in str(err.value) or "maximum step" in str(err.value)


def test_non_finite_loss_raises_and_leaves_model_unchanged():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(FloatingPointError, match="non-finite"):
        armijo_step([w], lambda: torch.sum(w) * float("nan"), 1.0, 1, ArmijoConfig())
    assert w.tolist() == [1.0, 2.0]


def test_non_finite_trial_loss_is_backtracked():
    # loss is inf for w > 0.5 after the step: the search must shrink the step rather than accept/NaN
    w = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)

    def closure():
        val = 0.5 * torch.sum(w**2)
        return val if abs(float(w)) <= 1.0 + 1e-12 else val * float("inf")

    res = armijo_step([w], closure, 1.0, 1, ArmijoConfig(eta_max=10.0))
    assert math.isfinite(w.item()) and res.accepted


def test_from_mapping_casts_and_ignores_extras():
    cfg = ArmijoConfig.from_mapping({"armijo_c": 0.2, "reset_option": 1, "lr": 0.5, "cap_at_eta_max": False})
    assert cfg.armijo_c == 0.2 and cfg.reset_option == 1 and cfg.cap_at_eta_max is False
    with pytest.raises(ValueError):
        ArmijoConfig.from_mapping({"backtrack_factor": 2.0})


def test_cross_entropy_default_loss_used():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    x, y = _data()
    cl = make_closure(model, x, y, seed=0)
    assert float(cl()) == pytest.approx(float(F.cross_entropy(model(x), y)))
