"""The client pieces alone (MoreauEnvelope, LocalSGD, SAM) and the ready-made client built on them:
closed forms in the user's own loop, the two clip scopes (ours vs the official code's), DataLoader
input, and every TrainConfig field honoured or rejected."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.dfedcata import (
    SAM,
    LocalSGD,
    MoreauEnvelope,
    DecentralizedClient,
    local_update,
)
from flwr_strategies.clients.training import TensorData, get_weights
from flwr_strategies.core.local import index_batches
from flwr_strategies.setup import ClientSetup, TrainConfig


class Vec(torch.nn.Module):
    def __init__(self, x0):
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))


def user_train(model, steps, lr, loss_fn, clip=None):
    """A user's unchanged training loop (plain torch.optim.SGD)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()


@pytest.mark.parametrize("lam", [0.0, 0.05, 0.3])
def test_moreau_envelope_around_a_users_loop_gives_the_prox_closed_form(lam):
    # f = 1/2||x - c||^2: x* = (c + lam x0)/(1 + lam), x_k - x* = (1 - eta(1+lam))^k (x0 - x*)
    eta, K = 0.1, 7
    c, x0 = np.array([1.0, 2.0, -3.0]), np.array([-1.0, 0.5, 0.0])
    model = Vec(x0)
    with MoreauEnvelope(model, lam=lam):
        user_train(model, K, eta, lambda m: 0.5 * ((m.p - torch.tensor(c)) ** 2).sum())
    xs = (c + lam * x0) / (1 + lam)
    np.testing.assert_allclose(model.p.detach().numpy() - xs, (1 - eta * (1 + lam)) ** K * (x0 - xs), rtol=1e-12, atol=1e-14)


def test_penalty_hook_and_optimizer_give_the_same_gradient():
    x0 = np.array([0.3, -0.2, 1.0])
    model = Vec(x0)
    env = MoreauEnvelope(model, lam=0.5)
    with torch.no_grad():
        model.p.add_(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    expected = 0.5 * np.array([1.0, 2.0, 3.0])
    env.penalty().backward()
    np.testing.assert_allclose(model.p.grad.numpy(), expected)
    model.p.grad = None
    with env:
        (model.p.sum() * 0).backward()  # zero data gradient: the hook adds the prox gradient
    np.testing.assert_allclose(model.p.grad.numpy(), expected)
    model.p.grad = None
    (model.p.sum() * 0).backward()  # outside the context: no hook any more
    np.testing.assert_array_equal(model.p.grad.numpy(), 0.0)
    np.testing.assert_allclose(env.gradient(0, model.p).numpy(), expected)


def test_moreau_validation():
    with pytest.raises(ValueError, match="lam"):
        MoreauEnvelope(Vec([0.0]), lam=-0.1)
    with pytest.raises(ValueError, match="lam"):
        MoreauEnvelope(Vec([0.0]), lam=float("nan"))
    with pytest.raises(ValueError, match="lr \\* lam"):
        LocalSGD(Vec([0.0]).parameters(), lr=0.5, moreau=MoreauEnvelope(Vec([0.0]), lam=2.0))


def _one_step(scope, a, y, lam, wd, clip, lr=0.1):
    """One LocalSGD step from the start point y (= the anchor) with a constant data gradient a."""
    model = Vec(y)
    env = MoreauEnvelope(model, lam=lam)
    opt = LocalSGD(model.parameters(), lr, weight_decay=wd, clip_norm=clip, clip_scope=scope, moreau=env)
    (torch.tensor(a) * model.p).sum().backward()
    opt.step()
    return model.p.detach().numpy()


def _clip(v, bound):
    n = np.linalg.norm(v)
    return v * (bound / (n + 1e-6)) if n > bound else v


def test_clip_scopes_pinned_against_the_two_formulas():
    # issue 14: ours clips the data gradient g alone; the official code clips g - lam*y and adds
    # (lam + wd) x after the clip. They differ once lam ||y|| exceeds the bound.
    a = np.array([3.0, -4.0])  # ||g|| = 5
    y = np.array([60.0, 80.0])  # lam ||y|| = 5 at lam = 0.05
    lam, wd, clip, lr = 0.05, 5e-4, 2.0, 0.1
    ours = _one_step("data", a, y, lam, wd, clip)
    official = _one_step("official", a, y, lam, wd, clip)
    np.testing.assert_allclose(ours, y - lr * (_clip(a, clip) + wd * y + lam * (y - y)), rtol=1e-12)
    np.testing.assert_allclose(official, y - lr * (_clip(a - lam * y, clip) + (lam + wd) * y), rtol=1e-12)
    assert np.abs(ours - official).max() > 1e-3
    # without clipping both are the same update
    np.testing.assert_allclose(_one_step("data", a, y, lam, wd, None), _one_step("official", a, y, lam, wd, None),
                               rtol=1e-12)


def test_official_scope_equals_the_official_codes_formulation():
    # the official client: torch SGD(weight_decay = lam + wd), loss + lam * (-<x, y>), clip_grad_norm_ 10
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(40.0)  # large weights: lam ||y|| above the clip bound
    x = torch.randn(16, 5, dtype=torch.float64)
    t = torch.randint(0, 3, (16,))
    lam, wd, clip, lr = 0.05, 5e-4, 10.0, 0.1
    ref = [p.detach().clone() for p in net.parameters()]
    official = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)).double()
    official.load_state_dict(net.state_dict())
    y = torch.cat([p.detach().reshape(-1) for p in official.parameters()])
    opt = torch.optim.SGD(official.parameters(), lr=lr, weight_decay=lam + wd)
    for _ in range(3):
        vec = torch.cat([p.reshape(-1) for p in official.parameters()])
        loss = torch.nn.functional.cross_entropy(official(x), t) + lam * (-(vec * y).sum())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(official.parameters(), clip)
        opt.step()
    ours = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)).double()
    ours.load_state_dict({k: v.clone() for k, v in zip(net.state_dict(), ref)} | {})
    env = MoreauEnvelope(ours, lam)
    mine = LocalSGD(ours.parameters(), lr, weight_decay=wd, clip_norm=clip, clip_scope="official", moreau=env)
    for _ in range(3):
        mine.zero_grad()
        torch.nn.functional.cross_entropy(ours(x), t).backward()
        mine.step()
    for p, q in zip(ours.parameters(), official.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-10)


def test_sam_wrapper_in_a_users_loop():
    # f = 1/2||x||^2: the step uses the gradient at x + rho x/||x|| = x (1 + rho/||x||)
    x0, eta, rho = np.array([3.0, 4.0]), 0.1, 0.1
    model = Vec(x0)
    opt = SAM(torch.optim.SGD(model.parameters(), lr=eta), rho=rho)
    loss_fn = lambda: 0.5 * (model.p ** 2).sum()  # noqa: E731
    opt.zero_grad()
    loss_fn().backward()

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)
    np.testing.assert_allclose(model.p.detach().numpy(), x0 - eta * x0 * (1 + rho / 5.0), rtol=1e-12)
    with pytest.raises(ValueError, match="rho"):
        SAM(torch.optim.SGD(model.parameters(), lr=eta), rho=-1.0)


# ------------------------------------------------------------------ the ready-made client
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 12)
        self.fc2 = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _data():
    g = torch.Generator().manual_seed(7)
    return torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)


def _client(train_data, params=None, **train):
    torch.manual_seed(0)
    model = Net()
    setup = ClientSetup(partition_id=1, num_partitions=3, model=model, train_data=train_data, test_data=None,
                        train=TrainConfig(**{"lr": 0.1, "local_epochs": 2, "batch_size": 8, **train}),
                        device="cpu", seed=5)
    return DecentralizedClient(setup, params or {}), get_weights(model)


CONFIG = {"lr": 0.1, "local_epochs": 2, "batch_size": 8, "server-round": 3, "seed": 5, "lam": 0.05}


def test_dataloader_input_gives_the_tensor_path_numbers():
    x, y = _data()
    a, w0 = _client(TensorData(x, y))
    wa, n, _ = a.fit(w0, dict(CONFIG))
    order = [idx.tolist() for idx in index_batches(40, 8, a.generator(CONFIG), epochs=2)]
    passes = [order[:5], order[5:]]

    class TwoPasses:  # a DataLoader whose batch order per pass is the seeded one
        def __init__(self):
            self.dataset = TensorDataset(x, y)
            self.k = 0

        def __iter__(self):
            batches = passes[self.k]
            self.k += 1
            return iter(DataLoader(self.dataset, batch_sampler=batches))

    b, _ = _client(TwoPasses())
    wb, nb, _ = b.fit(w0, dict(CONFIG))
    assert n == nb == 40
    for u, v in zip(wa, wb):
        np.testing.assert_array_equal(u, v)


def test_plain_dataloader_trains_and_counts_examples():
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(1))
    c, w0 = _client(loader)
    w, n, metrics = c.fit(w0, dict(CONFIG))
    assert n == 40 and metrics["steps"] == 2 * 3  # 2 epochs of ceil(40/16) batches
    assert any(not np.array_equal(u, v) for u, v in zip(w, w0))
    c.setup.test_data = loader
    loss, m, ev = c.evaluate(w, {})
    assert m == 40 and 0.0 <= ev["accuracy"] <= 1.0 and np.isfinite(loss)


def _fit_tensor(params=None, config=None, **train):
    x, y = _data()
    c, w0 = _client(TensorData(x, y), params, **train)
    return c.fit(w0, dict(config or CONFIG))[0], c


def _reference(clip_norm=None, momentum=0.0, weight_decay=0.0, clip_scope="data", lam=0.05):
    x, y = _data()
    torch.manual_seed(0)
    model = Net()
    c, _ = _client(TensorData(x, y))
    local_update(model, x, y, lr=0.1, batch_size=8, generator=c.generator(CONFIG), epochs=2, lam=lam,
                 momentum=momentum, weight_decay=weight_decay, clip_norm=clip_norm, clip_scope=clip_scope)
    return get_weights(model)


def _same(a, b):
    return all(np.array_equal(u, v) for u, v in zip(a, b))


def test_client_honours_grad_clip_weight_decay_and_momentum():
    assert _same(_fit_tensor(grad_clip=0.5)[0], _reference(clip_norm=0.5))
    assert not _same(_fit_tensor(grad_clip=0.5)[0], _fit_tensor()[0])
    assert _same(_fit_tensor(weight_decay=1e-2)[0], _reference(weight_decay=1e-2))
    assert _same(_fit_tensor(momentum=0.9)[0], _reference(momentum=0.9))
    assert _same(_fit_tensor({"local_momentum": 0.9})[0], _reference(momentum=0.9))
    assert _same(_fit_tensor({"clip_scope": "official"}, grad_clip=0.5)[0],
                 _reference(clip_norm=0.5, clip_scope="official"))
    with pytest.raises(ValueError, match="disagree"):
        _fit_tensor({"local_momentum": 0.9}, momentum=0.5)


def test_client_steps_and_lam_from_the_config():
    w_steps, c = _fit_tensor({"steps_per_round": 1})
    x, y = _data()
    torch.manual_seed(0)
    model = Net()
    local_update(model, x, y, lr=0.1, batch_size=8, generator=c.generator(CONFIG), steps=1, lam=0.05)
    assert _same(w_steps, get_weights(model))
    assert not _same(_fit_tensor(config={**CONFIG, "lam": 0.0})[0], _fit_tensor()[0])


def test_client_rejects_bad_local_rule_settings():
    x, y = _data()
    for params, name in (({"rho": -1.0}, "rho"), ({"local_momentum": 2.0}, "local_momentum"),
                         ({"clip_scope": "all"}, "clip_scope"), ({"steps_per_round": -1}, "steps_per_round")):
        with pytest.raises(ValueError, match=name):
            _client(TensorData(x, y), params)
