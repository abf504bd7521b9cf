"""Client pieces of spec 001 used alone: the ArmijoSGD optimizer (FedLi-LS) and SCAFFOLD's correction
and session, in a user's own loop with any batch format; the ready-made clients on DataLoaders."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.common import RecordDict
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.fedli import (
    STATE_KEY,
    ArmijoSGD,
    ArmijoSGDClient,
    LossReportingSGDClient,
    ScaffoldClient,
    ScaffoldCorrection,
    ScaffoldSession,
    SGDClient,
)
from flwr_strategies.clients.training import TensorData, count_examples, get_weights
from flwr_strategies.fedli import ArmijoConfig, armijo_local_train, reset_step_size
from flwr_strategies.setup import ClientSetup, TrainConfig

torch.set_num_threads(1)


def _data(n=96, d=8, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, k, (n,), generator=g)


def _mlp(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 3))


# ------------------------------------------------------------------ ArmijoSGD
def test_armijo_optimizer_exact_backtracking_on_1d_quadratic():
    """O2 through the optimizer: f = 2 w^2 at w = 1 accepts 0.9^8 after 8 reductions."""
    w = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = ArmijoSGD([w])
    loss = opt.step(lambda: 0.5 * 4.0 * torch.sum(w**2))
    assert loss == 2.0
    assert opt.step_size == pytest.approx(0.9**8, rel=1e-12) and opt.n_backtracks == 8
    assert w.item() == pytest.approx(1.0 - 0.9**8 * 4.0, rel=1e-12)


def test_armijo_optimizer_equals_the_ready_made_loop_with_dict_batches():
    """A user's loop with its own batch format (dicts) gives the ready-made loop's numbers bit for bit."""
    x, y = _data()
    order = torch.randperm(96, generator=torch.Generator().manual_seed(1))
    idx = [order[i:i + 16] for i in range(0, 96, 16)]
    cfg = ArmijoConfig(armijo_c=0.2)
    ref = _mlp(dropout=0.3)
    stats = armijo_local_train(ref, [(x[i], y[i]) for i in idx], cfg, torch.Generator().manual_seed(5), batch_fraction=16 / 96)
    mine = _mlp(dropout=0.3)
    mine.train()
    opt = ArmijoSGD(mine.parameters(), cfg, batch_fraction=16 / 96, generator=torch.Generator().manual_seed(5))
    for batch in ({"img": x[i], "label": y[i]} for i in idx):
        opt.step(lambda: F.cross_entropy(mine(batch["img"]), batch["label"]))  # noqa: B023
    assert opt.summary() == stats
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), mine.parameters()))


def test_armijo_optimizer_takes_torch_closures_that_call_backward():
    """A closure in torch's convention (zero_grad, loss, backward, return loss; as torch.optim.LBFGS
    takes) gives the loss-only closure's numbers bit for bit (issue 29: it failed inside torch with
    "backward through the graph a second time"), dropout included; the optimizer leaves no gradient."""
    x, y = _data()
    order = torch.randperm(96, generator=torch.Generator().manual_seed(1))
    idx = [order[i:i + 16] for i in range(0, 96, 16)]
    cfg = ArmijoConfig(armijo_c=0.5, eta_max=20.0)  # large first trials: every step backtracks
    runs = []
    for torch_style in (False, True):
        model = _mlp(dropout=0.3)
        model.train()
        opt = ArmijoSGD(model.parameters(), cfg, batch_fraction=16 / 96, generator=torch.Generator().manual_seed(5))
        for i in idx:
            def closure():
                if not torch_style:
                    return F.cross_entropy(model(x[i]), y[i])  # noqa: B023
                opt.zero_grad()  # noqa: B023
                loss = F.cross_entropy(model(x[i]), y[i])  # noqa: B023
                loss.backward()
                return loss

            opt.step(closure)
        assert all(p.grad is None for p in model.parameters())
        runs.append((opt.summary(), [p.detach().clone() for p in model.parameters()]))
    (plain, w_plain), (torch_like, w_torch) = runs
    assert torch_like == plain and plain["n_backtracks"] > 0  # the trial points ran through the closure
    assert all(torch.equal(a, b) for a, b in zip(w_plain, w_torch))


def test_armijo_optimizer_rejects_bad_arguments():
    w = torch.nn.Parameter(torch.tensor([1.0]))
    opt = ArmijoSGD([w])
    with pytest.raises(ValueError, match="closure"):
        opt.step(None)
    with pytest.raises(TypeError, match="unknown"):
        ArmijoSGD([w], lr=0.1)
    with pytest.raises(ValueError, match="batch_fraction"):
        ArmijoSGD([w], batch_fraction=0.0)


def test_sls_growth_rule_pins_the_official_code():
    """growth_rule="sls" (ArmijoConfig.code()): every step, step 1 included, starts from the previous
    step size times 2^(1/500), uncapped; the paper rule starts at eta_max and grows by 2^(b/n), capped."""
    code = ArmijoConfig.code()
    assert (code.growth_rule, code.sls_batches_per_epoch, code.cap_at_eta_max) == ("sls", 500, False)
    assert reset_step_size(0.3, 1, code, 0.5) == 2 ** (1 / 500)  # step 1 grows from eta_max = 1
    assert reset_step_size(0.3, 7, code, 0.5) == 0.3 * 2 ** (1 / 500)  # b/n is not used
    paper = ArmijoConfig()
    assert reset_step_size(0.3, 1, paper, 0.5) == 1.0
    assert reset_step_size(0.3, 7, paper, 0.5) == 0.3 * 2**0.5
    assert reset_step_size(0.9, 7, paper, 0.5) == 1.0  # capped at eta_max
    # on a very flat quadratic every first trial is accepted: the step sizes are the reset values
    w1 = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    w2 = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    sls, ours = ArmijoSGD([w1], code), ArmijoSGD([w2], paper, batch_fraction=0.25)
    for k in range(1, 21):
        sls.step(lambda: 0.5e-3 * torch.sum(w1**2))
        ours.step(lambda: 0.5e-3 * torch.sum(w2**2))
        assert sls.last_result.trials == 1 and sls.step_size == pytest.approx(2 ** (k / 500), rel=1e-13)
        assert ours.step_size == 1.0
    assert sls.step_size > 1.0


def test_armijo_optimizer_state_dict_round_trip():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = ArmijoSGD([w])
    opt.step(lambda: torch.sum(w**2))
    other = ArmijoSGD([w])
    other.load_state_dict(opt.state_dict())
    assert other.summary() == opt.summary()
    other.reset()
    assert other.steps == 0 and other.step_size == 1.0


# ------------------------------------------------------------------ SCAFFOLD
def test_scaffold_correction_shifts_gradients_and_gives_option_two_controls():
    model = _mlp()
    x, y = _data(16)
    cg = [np.full(tuple(p.shape), 0.5, np.float32) for p in model.parameters()]
    cl = [np.full(tuple(p.shape), 0.25, np.float32) for p in model.parameters()]
    ref = _mlp()
    F.cross_entropy(ref(x), y).backward()
    corr = ScaffoldCorrection(model, cg, cl)
    F.cross_entropy(model(x), y).backward()
    corr.apply()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad + 0.25)
    lr = 0.1
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    c_new, dc = corr.control_update(lr)  # one step: c_i+ = c_i - c + (w_t - w)/lr = corrected grad - (c - c_i)
    for c, d, q in zip(c_new, dc, ref.parameters()):
        np.testing.assert_allclose(c, q.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(d, c - 0.25, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="do not match"):
        ScaffoldCorrection(model, cg[:1])


def test_scaffold_session_keeps_c_i_in_context_state_and_equals_the_client():
    state = RecordDict()
    model = _mlp()
    w0 = get_weights(model)
    c0 = [np.zeros_like(a) for a in w0]
    x, y = _data(32)
    opt_lr = 0.1
    session = ScaffoldSession(model, w0 + c0, state)
    opt = torch.optim.SGD(model.parameters(), lr=opt_lr)
    for i in range(0, 32, 8):
        opt.zero_grad()
        F.cross_entropy(model(x[i:i + 8]), y[i:i + 8]).backward()
        session.correction.apply()
        opt.step()
    out = session.finish(opt_lr)
    L = len(w0)
    c1 = state[STATE_KEY].to_numpy_ndarrays()
    for j in range(L):  # with c = c_i = 0: c_i+ = (w_t - w_i) / (K lr) and dc = c_i+
        np.testing.assert_allclose(c1[j], (w0[j] - out[j]) / (4 * opt_lr), rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(out[L + j], c1[j])
    with pytest.raises(RuntimeError, match="context.state"):
        ScaffoldSession(_mlp(), w0 + c0, None)
    with pytest.raises(ValueError, match="arrays"):
        ScaffoldSession(_mlp(), w0, state)


# ------------------------------------------------------------------ ready-made clients on DataLoaders
def _setup(train_data, state=None, **train):
    return ClientSetup(partition_id=3, num_partitions=5, model=_mlp(), train_data=train_data, test_data=None,
                       train=TrainConfig(**{"lr": 0.1, "local_epochs": 1, "batch_size": 16, **train}),
                       device=torch.device("cpu"), seed=7, state=state)


def _loader(n=64):
    x, y = _data(n)
    return DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)


def _manual_sgd(loader, lr, epochs=1, clip=None):
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
    return get_weights(model)


def test_sgd_and_loss_clients_train_on_a_dataloader_like_a_plain_loop():
    loader = _loader()
    assert count_examples(loader) == 64
    cfg = {"server-round": 1, "lr": 0.05, "local_epochs": 2, "seed": 7}
    w, n, m = SGDClient(_setup(loader, grad_clip=0.5), {}).fit(get_weights(_mlp()), cfg)
    assert n == 64 and m["steps"] == 8
    assert all(np.array_equal(a, b) for a, b in zip(w, _manual_sgd(loader, 0.05, epochs=2, clip=0.5)))
    _, _, m2 = LossReportingSGDClient(_setup(loader), {}).fit(get_weights(_mlp()), {**cfg, "loss_report": "final"})
    assert m2["train_loss"] < m2["epoch_mean_loss"] + 1.0 and math.isfinite(m2["train_loss"])
    loss, n_eval, metrics = SGDClient(_setup(loader), {}).evaluate(w, {})
    assert n_eval == 64 and 0.0 <= metrics["accuracy"] <= 1.0 and math.isfinite(loss)
    _, _, m3 = SGDClient(_setup(loader), {}).fit(get_weights(_mlp()), {**cfg, "local_steps": 6, "local_epochs": 0})
    assert m3["steps"] == 6  # steps cycle over the loader


def test_armijo_client_on_a_dataloader_and_unsupported_settings():
    loader = _loader()
    w0 = get_weights(_mlp())
    cfg = {"server-round": 1, "seed": 7, "eta_max": 0.5}
    _, n, m = ArmijoSGDClient(_setup(loader), {}).fit(w0, cfg)
    assert n == 64 and m["steps"] == 4 and 0 < m["step_size"] <= 0.5
    _, _, m_t = ArmijoSGDClient(_setup(TensorData(*_data(64))), {}).fit(w0, cfg)
    assert m_t["steps"] == 4
    for bad in ({"weight_decay": 1e-4}, {"momentum": 0.9}, {"grad_clip": 1.0}):
        with pytest.raises(ValueError, match=list(bad)[0]):
            ArmijoSGDClient(_setup(loader, **bad), {}).fit(w0, cfg)


def test_scaffold_client_on_a_dataloader_with_clip_scope():
    loader = _loader()
    model = _mlp()
    w0 = get_weights(model)
    c = [np.full_like(a, 0.5) for a in w0]
    cfg = {"server-round": 1, "lr": 0.1, "local_epochs": 1, "seed": 7}
    a = ScaffoldClient(_setup(loader, state=RecordDict(), grad_clip=0.1), {}).fit(w0 + c, cfg)[0]
    b = ScaffoldClient(_setup(loader, state=RecordDict(), grad_clip=0.1), {}).fit(
        w0 + c, {**cfg, "scaffold_correction_in_clip": True})[0]
    L = len(w0)
    # clipping the raw gradient then adding c keeps the full correction; clipping g + c shrinks it
    moved_a = sum(float(np.abs(x - y).sum()) for x, y in zip(a[:L], w0))
    moved_b = sum(float(np.abs(x - y).sum()) for x, y in zip(b[:L], w0))
    assert moved_a > 5 * moved_b
