"""The client pieces under the user's own optimizer (issue 19) and the one local loop they share (issue 20).

- the one loop (``flwr_strategies.core.local``) equals a hand-written torch loop bit for bit;
- SCAFFOLD's control variate stays option II's value (the mean of the local gradients) under momentum
  and Adam, and keeps the paper's formula bit for bit under plain SGD;
- FedMUD's ``init_scale="auto"``: one SGD step on the factors moves the weight as a plain SGD step in
  expectation (unit gain), FedLMT's product starts at PyTorch's default weight variance, and server
  and client draw the same factors;
- ``FedMUDRound`` refuses an optimizer built before the wrapping, stops at the first non-finite
  factor naming the optimizer, and FedLMT refuses an SGD step above its measured limit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import RecordDict
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.fedmud import FedMUDRound
from flwr_strategies.clients.training import TensorData, local_sgd
from flwr_strategies.core.local import batch_stream, index_batches, train_steps
from flwr_strategies.fedli import ScaffoldCorrection, scaffold_client_control_update
from flwr_strategies.fedmud import strategy as mud_legacy
from flwr_strategies.fedmud.config import FedMUDConfig
from flwr_strategies.fedmud.delta import UpdateDecomposition, auto_variances
from flwr_strategies.fedmud.sizing import plan_layer


def _data(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def _mlp(seed=1):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


# ------------------------------------------------------------------ the one local loop
def test_one_loop_equals_a_hand_written_loop_on_a_dataloader_and_on_tensors():
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)
    ref = _mlp()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    for _ in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(ref(xb), yb).backward()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
            opt.step()
    model = _mlp()
    stats = local_sgd(model, loader, lr=0.1, momentum=0.9, weight_decay=1e-3, grad_clip=0.5, epochs=2)
    assert stats["steps"] == 6
    assert all(torch.equal(a, b) for a, b in zip(_weights(model), _weights(ref)))
    # in-memory data: seeded minibatches in index_batches order, a new permutation per pass
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    order = [idx for idx in index_batches(48, 16, gen_a, steps=5)]
    got = list(batch_stream(TensorData(x, y), steps=5, batch_size=16, generator=gen_b))
    assert len(got) == 5 and all(torch.equal(xb, x[i]) for (xb, _), i in zip(got, order))
    assert sorted(torch.cat(order[:3]).tolist()) == list(range(48))  # one full pass, then reshuffled


def test_one_loop_checks_finiteness_when_asked():
    model = _mlp()
    x, y = _data(8)
    x[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="my client: non-finite minibatch loss at local step 1"):
        train_steps(model, [(x, y)], torch.optim.SGD(model.parameters(), lr=0.1), check_finite="my client")


# ------------------------------------------------------------------ SCAFFOLD under the user's optimizer
def _scaffold_run(make_opt, steps=6):
    """A user's loop: the correction after every backward(); returns (c_i+, mean raw gradient, rule)."""
    x, y = _data()
    model = _mlp()
    params = list(model.parameters())
    c_glob = [np.full(tuple(p.shape), 0.01, dtype=np.float32) for p in params]
    c_loc = [np.full(tuple(p.shape), -0.02, dtype=np.float32) for p in params]
    corr = ScaffoldCorrection(model, c_glob, c_loc)
    start = [p.detach().numpy().copy() for p in params]
    opt = make_opt(params)
    raw = [np.zeros(tuple(p.shape)) for p in params]
    for k in range(steps):
        xb, yb = x[8 * k:8 * k + 8], y[8 * k:8 * k + 8]
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        raw = [r + p.grad.double().numpy() for r, p in zip(raw, params)]
        corr.apply()
        opt.step()
    group = opt.param_groups[0]
    c_new, dc = corr.control_update(group["lr"])
    return c_new, [r / steps for r in raw], corr.rule, (start, [p.detach().numpy() for p in params], c_glob, c_loc)


@pytest.mark.parametrize("make_opt", [lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.9),
                                      lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.9, nesterov=True),
                                      lambda p: torch.optim.Adam(p, lr=0.01)], ids=["momentum", "nesterov", "adam"])
def test_scaffold_control_is_the_mean_local_gradient_under_any_optimizer(make_opt):
    c_new, mean_grad, rule, (w0, w1, c_glob, c_loc) = _scaffold_run(make_opt)
    assert rule == "gradients"
    for c, g in zip(c_new, mean_grad):
        np.testing.assert_allclose(c, g, rtol=1e-5, atol=1e-7)
    # the displacement formula would have been far off (momentum inflates it)
    wrong, _ = scaffold_client_control_update(c_loc, c_glob, w0, w1, 6, 0.02)
    assert max(float(np.abs(a - g).max()) for a, g in zip(wrong, mean_grad)) > 10 * max(
        float(np.abs(a - g).max()) for a, g in zip(c_new, mean_grad))


def test_scaffold_refuses_a_momentum_step_above_its_measured_limit():
    model = _mlp()
    corr = ScaffoldCorrection(model, [np.zeros(tuple(p.shape)) for p in model.parameters()])
    x, y = _data(8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    F.cross_entropy(model(x), y).backward()
    corr.apply()
    with pytest.raises(ValueError, match=r"SCAFFOLD refuses SGD\(lr=0.05, momentum=0.9\).*lr <= 0.02 with momentum 0.9"):
        opt.step()
    plain = torch.optim.SGD(model.parameters(), lr=1.0)  # plain SGD (the paper's client) is never refused
    plain.step()


def test_scaffold_keeps_the_papers_formula_bit_for_bit_under_plain_sgd():
    c_new, mean_grad, rule, (w0, w1, c_glob, c_loc) = _scaffold_run(lambda p: torch.optim.SGD(p, lr=0.05))
    assert rule == "trajectory"
    paper, _ = scaffold_client_control_update(c_loc, c_glob, w0, w1, 6, 0.05)
    assert all(np.array_equal(a, b) for a, b in zip(c_new, paper))
    for c, g in zip(c_new, mean_grad):  # and it is the mean local gradient, as option II says
        np.testing.assert_allclose(c, g, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ FedMUD's init_scale="auto"
@pytest.mark.parametrize("decomp,pattern", [("kron", "aad"), ("kron", "ab"), ("mat", "aad"), ("mat", "ab"), ("mat", "freeze")])
def test_auto_init_gives_unit_expected_gain(decomp, pattern):
    """E over the random factors of the weight change of one SGD step on the factors is -eta G."""
    plan = plan_layer("fc", (12, 20), 12, 20, decomp, pattern, 0.3)
    torch.manual_seed(0)
    grad = torch.randn(12, 20)
    eta, acc, draws = 0.1, torch.zeros(12, 20, dtype=torch.float64), 600
    for seed in range(draws):
        deco = UpdateDecomposition(plan, 0, "auto")
        deco.reset(seed)  # dW = 0: random partners, trainable factors at zero (ab: the right one)
        delta = deco.delta_matrix()
        (delta * grad).sum().backward()
        with torch.no_grad():
            trainable = {"ab": ["right"], "freeze": ["right"], "aad": ["right", "left"]}[pattern]
            for name in trainable:
                getattr(deco, name).sub_(eta * getattr(deco, name).grad)
            acc += deco.delta_matrix().double()
    mean = acc / draws
    gain = float((mean * -grad).sum() / (eta * (grad * grad).sum()))
    assert gain == pytest.approx(1.0, abs=0.12), gain


def test_auto_init_fedlmt_product_has_pytorchs_default_variance():
    plan = plan_layer("fc", (64, 100), 64, 100, "mat", "ab", 0.3)
    vl, vr = auto_variances(plan, random_right=True)
    assert plan.rank * vl * vr == pytest.approx(1 / (3 * 100))
    deco = UpdateDecomposition(plan, 0, "auto", random_right=True)
    variances = []
    for seed in range(20):
        deco.reset(seed)
        variances.append(float(deco.delta_matrix().var()))
    assert np.mean(variances) == pytest.approx(1 / 300, rel=0.1)  # nn.Linear(100, 64) starts with Uniform(+-1/10): variance 1/300


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3, self.fc4 = nn.Linear(6, 32), nn.Linear(32, 64), nn.Linear(64, 32), nn.Linear(32, 3)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        return self.fc4(torch.relu(self.fc3(torch.relu(self.fc2(x)))))


def _round(cls=mud_legacy.FedMUD, **kw):
    torch.manual_seed(0)
    init = [v.numpy().copy() for v in Net().state_dict().values()]
    core = cls(model=Net(), initial_parameters=init, target_ratio=0.5, seed=2, **kw).core
    ins = core.configure_train(1, [0])[0]
    model = Net()
    return core, FedMUDRound(model, ins.arrays, ins.config, RecordDict()), model


def test_auto_init_travels_to_the_client_and_both_sides_draw_the_same_factors():
    assert FedMUDConfig.from_wire(FedMUDConfig(init_scale="auto").to_wire())[0].init_scale == "auto"
    core, mud, model = _round(init_scale="auto", base_init="given")
    server = dict(core.dm.model.state_dict())
    for key, value in model.state_dict().items():
        if "frozen" in key:
            assert torch.equal(value, server[key]), key
    with pytest.raises(ValueError, match="init_scale"):
        FedMUDConfig(init_scale="big")
    mud.finish()


# ------------------------------------------------------------------ FedMUDRound's step watch
def test_round_refuses_an_optimizer_built_before_the_wrapping():
    torch.manual_seed(0)
    init = [v.numpy().copy() for v in Net().state_dict().values()]
    core = mud_legacy.FedMUD(model=Net(), initial_parameters=init, target_ratio=0.5).core
    ins = core.configure_train(1, [0])[0]
    model = Net()
    early = torch.optim.SGD(model.parameters(), lr=0.01)  # holds the plain weights, not the factors
    mud = FedMUDRound(model, ins.arrays, ins.config, RecordDict())
    x, y = _data(8)
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(RuntimeError, match="none of its trainable factors"):
        early.step()
    mud.finish()
    plain = torch.optim.SGD(model.parameters(), lr=0.01)  # after finish(): no watch any more
    F.cross_entropy(model(x), y).backward()
    plain.step()


def test_round_stops_at_the_first_non_finite_factor_naming_the_optimizer():
    _, mud, model = _round()
    opt = torch.optim.SGD(model.parameters(), lr=1e30, momentum=0.9)
    x, y = _data(8)
    with pytest.raises(FloatingPointError, match=r"local step \d+ under SGD\(lr=1e\+30, momentum=0.9.*init_scale='auto'"):
        for _ in range(20):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    mud.finish()


@pytest.mark.parametrize("lr,momentum,refused", [(0.05, 0.9, True), (0.03, 0.9, False), (0.1, 0.0, False), (0.5, 0.0, True)])
def test_fedlmt_refuses_an_sgd_step_above_its_measured_limit(lr, momentum, refused):
    _, mud, model = _round(mud_legacy.FedLMT, init_scale="auto")
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    x, y = _data(8)
    F.cross_entropy(model(x), y).backward()
    if refused:
        with pytest.raises(ValueError, match=rf"FedLMT refuses SGD\(lr={lr}, momentum={momentum}"):
            opt.step()
    else:
        opt.step()
    adam = torch.optim.Adam(model.parameters(), lr=0.003)  # not an SGD step: not refused
    adam.step()
    mud.finish()

