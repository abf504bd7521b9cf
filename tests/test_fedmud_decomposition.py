"""Oracles of FedMUD's decomposition (spec 004, Sections 9.1, 9.2 and 9.5)."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedmud_testmodels import tiny_net
from flwr_strategies.fedmud import (
    VARIANTS, DecomposedModel, batched_kron, bkd_delta, is_push_round, plan_at_rho, validate_reset_interval,
)

VARIANT_LIST = sorted(VARIANTS.values())


def _wrap(net, decomp, pattern, seed=3, rho=0.5, **kw):
    plan = plan_at_rho(net, decomp, pattern, rho)
    return DecomposedModel(net, plan, seed=seed, **kw)


def _batch(seed=0, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, 5, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


def _sgd_steps(model, steps, lr=0.05, seed=0):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for s in range(steps):
        x, y = _batch(seed + s)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


# ---------------------------------------------------------------- Kronecker / BKD (oracles 6-9)
A = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
B = torch.tensor([[0.0, 5.0], [6.0, 7.0]])


def test_kron_small_example():
    expected = torch.tensor([[0, 5, 0, 10], [6, 7, 12, 14], [0, 15, 0, 20], [18, 21, 24, 28]], dtype=torch.float32)
    out = batched_kron(A[None], B[None])[0]
    assert torch.equal(out, expected) and torch.equal(out, torch.kron(A, B))


def test_batched_kron_slices():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 3, 3, generator=g), torch.randn(5, 3, 3, generator=g)
    out = batched_kron(a, b)
    assert out.shape == (5, 9, 9)
    for i in range(5):
        assert torch.equal(out[i], torch.kron(a[i], b[i]))


def test_crop_layout_small_example():
    dw = bkd_delta(A[None], B[None], 3, 5)
    expected = torch.tensor([[0, 5, 0, 10, 6], [7, 12, 14, 0, 15], [0, 20, 18, 21, 24]], dtype=torch.float32)
    assert torch.equal(dw, expected)


def test_crop_layout_in_a_layer():
    """A 3x5 linear layer with nb=1, z=2 BKD: its effective weight is W_base + the cropped layout."""
    net = nn.Sequential(nn.Linear(2, 5), nn.Linear(5, 3, bias=False), nn.Linear(3, 2))
    dm = _wrap(net, "kron", "ab", rho=0.01)
    (name, deco), = dm.decompositions()
    assert (deco.plan.rank, deco.plan.side) == (1, 2)
    base = dm.base(name).clone()
    with torch.no_grad():
        deco.left.copy_(A[None])
        deco.right.copy_(B[None])
    expected = torch.tensor([[0, 5, 0, 10, 6], [7, 12, 14, 0, 15], [0, 20, 18, 21, 24]], dtype=torch.float32)
    assert torch.equal(net[1].weight, base + expected)


# ---------------------------------------------------------------- reset / init (oracles 1-4)
@pytest.mark.parametrize("decomp,pattern", VARIANT_LIST)
def test_init_effective_model_equals_plain_model(decomp, pattern):
    torch.manual_seed(0)
    plain = tiny_net()
    plain.eval()
    net = copy.deepcopy(plain)
    dm = _wrap(net, decomp, pattern)
    net.eval()
    x, _ = _batch()
    assert torch.equal(net(x), plain(x))
    eff = dm.effective_state_dict()
    assert list(eff) == list(plain.state_dict())
    for k, v in plain.state_dict().items():
        assert torch.equal(eff[k], v), k
    for _, deco in dm.decompositions():
        assert torch.count_nonzero(deco.delta()) == 0


@pytest.mark.parametrize("decomp,pattern", VARIANT_LIST)
def test_reset_keeps_effective_model(decomp, pattern):
    """After training, merge+reset leaves the effective weights (and outputs) bit-identical, for
    several consecutive resets."""
    torch.manual_seed(1)
    net = tiny_net()
    dm = _wrap(net, decomp, pattern)
    x, _ = _batch(5)
    for rnd in range(3):
        _sgd_steps(net, 3, seed=10 * rnd)
        before = dm.effective_state_dict()
        assert any(torch.count_nonzero(d.delta()) > 0 for _, d in dm.decompositions())
        net.eval()
        out_before = net(x)
        dm.merge_and_reset(100 + rnd)
        after = dm.effective_state_dict()
        for k in before:
            assert torch.equal(before[k], after[k]), k
        for name, deco in dm.decompositions():
            assert torch.count_nonzero(deco.delta()) == 0
            assert torch.equal(net.get_submodule(name).weight, dm.base(name))
        assert torch.equal(net(x), out_before)


@pytest.mark.parametrize("decomp,pattern", VARIANT_LIST)
def test_same_seed_same_factors_and_distinct_streams(decomp, pattern):
    torch.manual_seed(2)
    base = tiny_net()
    d1 = _wrap(copy.deepcopy(base), decomp, pattern, seed=7)
    d2 = _wrap(copy.deepcopy(base), decomp, pattern, seed=7)
    d3 = _wrap(copy.deepcopy(base), decomp, pattern, seed=8)
    s1, s2, s3 = (dict(d.model.state_dict()) for d in (d1, d2, d3))
    for k in s1:
        assert torch.equal(s1[k], s2[k]), k
    rand_key = "left" if pattern == "ab" else "left_frozen"
    keys = [k for k in s1 if k.endswith("weight.0." + rand_key)]
    assert len(keys) == 2
    assert not torch.equal(s1[keys[0]], s3[keys[0]])  # other seed -> other draw
    # different layers draw different values (compare the common prefix of the flattened draws)
    a, b = s1[keys[0]].flatten(), s1[keys[1]].flatten()
    k = min(a.numel(), b.numel())
    assert not torch.equal(a[:k], b[:k])
    if pattern == "aad":
        for _, deco in d1.decompositions():
            lf, rf = deco.left_frozen.flatten(), deco.right_frozen.flatten()
            k = min(lf.numel(), rf.numel())
            assert not torch.equal(lf[:k], rf[:k])
    scale = d1.init_scale
    for _, deco in d1.decompositions():
        t = getattr(deco, rand_key)
        assert t.abs().max() <= scale and t.abs().max() > 0.5 * scale


@pytest.mark.parametrize("decomp,pattern", VARIANT_LIST)
def test_frozen_tensors_unchanged_trainables_change(decomp, pattern):
    torch.manual_seed(3)
    net = tiny_net()
    dm = _wrap(net, decomp, pattern)
    frozen = {n: b.clone() for n, b in net.named_buffers() if "parametrizations" in n}
    frozen.update({n: p.clone() for n, p in net.named_parameters() if not p.requires_grad})
    assert any(n.endswith("original") for n in frozen)
    for n, p in net.named_parameters():
        if n.endswith("original"):
            assert not p.requires_grad
    # factors (a conv bias in front of BatchNorm gets no gradient, so dense params are not checked)
    trainable = {n: p.clone() for n, p in net.named_parameters() if p.requires_grad and "parametrizations" in n}
    assert trainable
    _sgd_steps(net, 2)
    now = dict(net.named_parameters())
    now.update(dict(net.named_buffers()))
    for n, v in frozen.items():
        assert torch.equal(now[n], v), n
    for n, v in trainable.items():
        assert not torch.equal(now[n], v), n


# ---------------------------------------------------------------- first-step closed forms (oracle 5)
def _grad_of_weight(layer_weight, x, y):
    """G = dL/dW for the plain middle linear layer of a 3-layer net with the given weight."""
    w = layer_weight.clone().requires_grad_(True)
    loss = F.cross_entropy(F.linear(torch.tanh(x), w), y)
    loss.backward()
    return w.grad


def _lin_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Identity(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 8, bias=False), nn.Linear(8, 8))


@pytest.mark.parametrize("decomp,pattern", VARIANT_LIST)
def test_first_step_gradients(decomp, pattern):
    net = _lin_net()
    dm = _wrap(net, decomp, pattern, rho=0.5)
    (name, deco), = dm.decompositions()
    layer = net.get_submodule(name)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(16, 6, generator=g), torch.randint(0, 8, (16,), generator=g)
    G = _grad_of_weight(dm.base(name).detach(), x, y)
    loss = F.cross_entropy(F.linear(torch.tanh(x), layer.weight), y)
    loss.backward()
    if decomp == "mat":
        if pattern == "ab":
            assert torch.count_nonzero(deco.left.grad) == 0
            assert torch.allclose(deco.right.grad, deco.left.T @ G, atol=1e-6)
        elif pattern == "freeze":
            assert torch.allclose(deco.right.grad, deco.left_frozen.T @ G, atol=1e-6)
        else:
            assert torch.allclose(deco.right.grad, deco.left_frozen.T @ G, atol=1e-6)
            assert torch.allclose(deco.left.grad, G @ deco.right_frozen.T, atol=1e-6)
    else:
        if pattern == "ab":
            assert torch.count_nonzero(deco.left.grad) == 0
        assert torch.count_nonzero(deco.right.grad) > 0
        if pattern == "aad":
            assert torch.count_nonzero(deco.left.grad) > 0


@pytest.mark.parametrize("pattern", ["ab", "freeze", "aad"])
def test_one_sgd_step_closed_form_mat(pattern):
    net = _lin_net(1)
    dm = _wrap(net, "mat", pattern, rho=0.5)
    (name, deco), = dm.decompositions()
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(16, 6, generator=g), torch.randint(0, 8, (16,), generator=g)
    G = _grad_of_weight(dm.base(name).detach(), x, y)
    lr = 0.1
    layer = net.get_submodule(name)
    F.cross_entropy(F.linear(torch.tanh(x), layer.weight), y).backward()
    with torch.no_grad():
        for p in deco.parameters():
            p -= lr * p.grad
    if pattern == "ab":
        expected = -lr * deco.left @ deco.left.T @ G
    elif pattern == "freeze":
        expected = -lr * deco.left_frozen @ deco.left_frozen.T @ G
    else:
        expected = -lr * (deco.left_frozen @ deco.left_frozen.T @ G + G @ deco.right_frozen.T @ deco.right_frozen)
    assert torch.allclose(deco.delta_matrix(), expected, atol=1e-6)


# ---------------------------------------------------------------- conv layers (oracle 10)
@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 1), (2, 1), (2, 2)])
@pytest.mark.parametrize("decomp", ["mat", "kron"])
def test_conv_shapes_and_rowmajor_reshape(stride, padding, decomp):
    torch.manual_seed(6)
    mid = nn.Conv2d(3, 5, 3, stride=stride, padding=padding, bias=True)
    x = torch.randn(2, 2, 9, 9)
    feat = mid(torch.zeros(1, 3, 9, 9)).numel()
    net = nn.Sequential(nn.Conv2d(2, 3, 1), mid, nn.Flatten(), nn.Linear(feat, 2))
    dense_out = mid(net[0](x))
    dm = _wrap(net, decomp, "aad", rho=0.5)
    (name, deco), = dm.decompositions()
    assert (deco.plan.m, deco.plan.n) == (5 * 3, 3 * 3)
    with torch.no_grad():
        for p in deco.parameters():
            p.normal_()
    dw = deco.delta_matrix()
    w_eff = dm.base(name) + dw.reshape(5, 3, 3, 3)
    assert torch.equal(mid.weight, w_eff)
    out = mid(net[0](x))
    assert out.shape == dense_out.shape
    ref = F.conv2d(net[0](x), w_eff, mid.bias, stride=stride, padding=padding)
    assert torch.allclose(out, ref, atol=1e-6)


# ---------------------------------------------------------------- protocol (oracles 17-19)
def test_push_schedule():
    assert [t for t in range(1, 12) if is_push_round(t, 1)] == list(range(2, 12))
    assert [t for t in range(1, 14) if is_push_round(t, 4)] == [5, 9, 13]
    assert [t for t in range(1, 30) if is_push_round(t, 100)] == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="reset_interval must be an integer >= 1"):
            validate_reset_interval(bad)


def test_no_training_means_no_change():
    """s = 1 and zero local steps: repeated merge+reset never changes the global model."""
    torch.manual_seed(7)
    net = tiny_net()
    dm = _wrap(net, "kron", "aad")
    start = dm.effective_state_dict()
    for t in range(2, 6):
        dm.merge_and_reset(t)
    for k, v in dm.effective_state_dict().items():
        assert torch.equal(v, start[k])


def test_fedlmt_is_fedmud_with_zero_base_and_random_factors():
    torch.manual_seed(8)
    lmt = _wrap(tiny_net(), "mat", "ab", seed=4, random_right=True, zero_base=True)
    for name, deco in lmt.decompositions():
        assert torch.count_nonzero(lmt.base(name)) == 0
        assert torch.count_nonzero(deco.right) > 0
        assert torch.equal(lmt.model.get_submodule(name).weight, (deco.left @ deco.right).reshape(deco.plan.shape))


def test_payload_schema_excludes_frozen_state():
    torch.manual_seed(9)
    net = tiny_net()
    bn_buffers = sum(b.numel() for n, b in net.named_buffers() if b.is_floating_point())
    for decomp, pattern in VARIANT_LIST:
        dm = _wrap(copy.deepcopy(net), decomp, pattern)
        keys = dm.payload_keys()
        assert not any(k.endswith("original") or k.endswith("_frozen") for k in keys)
        assert sum(a.size for a in dm.get_payload()) == dm.plan.p_payload + bn_buffers
        # round trip
        arrays = [np.full_like(a, 0.5) for a in dm.get_payload()]
        dm.set_payload(arrays)
        assert all(np.all(a == 0.5) for a in dm.get_payload())
