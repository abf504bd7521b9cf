"""Parameter-count / ratio oracles of FedMUD (spec 004, Section 9.4) and sizing errors."""

import math

import pytest
import torch
from torch import nn

from fedmud_testmodels import PAPER_MODELS
from flwr_strategies.fedmud import (
    UnreachableRatioError, bkd_blocks, bkd_side, compressible_layers, plan_at_rho, plan_model,
    smallest_reachable_ratio,
)

# spec 9.4: (model, decomp, pattern) -> (final rho_layer, P_payload, P_dense, ratio)
TABLE = [
    ("fmnist", "mat", "ab", 0.01925, 11872, 390880, 0.03037),
    ("fmnist", "mat", "aad", 0.01925, 11872, 390880, 0.03037),
    ("fmnist", "mat", "freeze", 0.02125, 12544, 390880, 0.03209),
    ("fmnist", "kron", "ab", 0.02025, 12008, 390880, 0.03072),
    ("fmnist", "kron", "aad", 0.02025, 12008, 390880, 0.03072),
    ("fmnist", "kron", "freeze", 0.02125, 12481, 390880, 0.03193),
    ("svhn", "mat", "ab", 0.00025, 14080, 399136, 0.03528),
    ("svhn", "mat", "aad", 0.00025, 14080, 399136, 0.03528),
    ("svhn", "kron", "ab", 0.00025, 14082, 399136, 0.03528),
    ("svhn", "kron", "aad", 0.00025, 14082, 399136, 0.03528),
    ("cifar10", "mat", "ab", 0.02925, 151840, 4719328, 0.03217),
    ("cifar10", "mat", "aad", 0.02925, 151840, 4719328, 0.03217),
    ("cifar10", "mat", "freeze", 0.02925, 149056, 4719328, 0.03158),
    ("cifar10", "kron", "ab", 0.02725, 152026, 4719328, 0.03221),
    ("cifar10", "kron", "aad", 0.02725, 152026, 4719328, 0.03221),
    ("cifar10", "kron", "freeze", 0.02825, 145384, 4719328, 0.03081),
    ("cifar100", "mat", "ab", 0.01925, 149536, 4765408, 0.03138),
    ("cifar100", "mat", "aad", 0.01925, 149536, 4765408, 0.03138),
    ("cifar100", "kron", "ab", 0.02025, 153232, 4765408, 0.03216),
    ("cifar100", "kron", "aad", 0.02025, 153232, 4765408, 0.03216),
    ("cifar100", "kron", "freeze", 0.01725, 145952, 4765408, 0.03063),
]

_MODELS = {}


def model(name):
    if name not in _MODELS:
        _MODELS[name] = PAPER_MODELS[name]()
    return _MODELS[name]


@pytest.mark.parametrize("name,decomp,pattern,rho,payload,dense,ratio", TABLE)
def test_parameter_count_table(name, decomp, pattern, rho, payload, dense, ratio):
    plan = plan_model(model(name), decomp, pattern, 1 / 32, strict=False)
    assert plan.p_dense == dense
    assert plan.p_payload == payload
    assert plan.rho_layer == pytest.approx(rho, abs=1e-9)
    assert round(plan.ratio, 5) == ratio


def test_per_layer_detail():
    c10 = plan_model(model("cifar10"), "kron", "aad", 1 / 32)
    assert [lp.rank for lp in c10.layers] == [2, 4, 7, 14, 28, 55, 110, 219, 438]
    assert {lp.side for lp in c10.layers} == {9}
    assert [lp.payload for lp in c10.layers] == [324, 648, 1134, 2268, 4536, 8910, 17820, 35478, 70956]
    assert c10.p_other == 864 + 5120 + 3968
    c10m = plan_model(model("cifar10"), "mat", "ab", 1 / 32)
    assert [lp.rank for lp in c10m.layers] == [2, 2, 3, 4, 6, 8, 12, 15, 23]
    assert [lp.payload for lp in c10m.layers] == [384, 576, 1152, 2304, 4608, 9216, 18432, 34560, 70656]
    fm = plan_model(model("fmnist"), "mat", "ab", 1 / 32)
    assert [lp.rank for lp in fm.layers] == [2, 3, 5] and [lp.payload for lp in fm.layers] == [576, 1728, 5760]
    fk = plan_model(model("fmnist"), "kron", "ab", 1 / 32)
    assert [lp.rank for lp in fk.layers] == [2, 8, 31] and [lp.side for lp in fk.layers] == [10] * 3
    assert [lp.payload for lp in fk.layers] == [400, 1600, 6200]
    sk = plan_model(model("svhn"), "kron", "ab", 1 / 32, strict=False)
    assert [lp.rank for lp in sk.layers] == [1] * 3 and [lp.side for lp in sk.layers] == [12, 17, 24]
    assert [lp.payload for lp in sk.layers] == [288, 578, 1152]


@pytest.mark.parametrize("name,target,mat,kron", [
    ("fmnist", 1 / 8, 48160, 48458), ("cifar10", 1 / 8, 593248, 587152),
    ("fmnist", 1 / 16, 23968, 24388), ("cifar10", 1 / 16, 298912, 290536),
])
def test_other_targets(name, target, mat, kron):
    assert plan_model(model(name), "mat", "ab", target).p_payload == mat
    assert plan_model(model(name), "kron", "ab", target).p_payload == kron


def test_compressed_layers_are_all_but_first_and_last():
    names = [n for n, _ in compressible_layers(model("cifar10"))]
    convs = [n for n, m in model("cifar10").named_modules() if isinstance(m, nn.Conv2d)]
    assert names == convs[1:]
    assert [n for n, _ in compressible_layers(model("fmnist"))] == ["4", "8", "12"]


def test_kron_side_minimal_and_idealised_formulas():
    for numel in (1, 7, 16, 17, 288 * 96, 18432, 2359296):
        for nb in (1, 2, 3, 31, 438):
            z = bkd_side(numel, nb)
            assert nb * z**4 >= numel and (z == 1 or nb * (z - 1) ** 4 < numel)
    # idealised: mat r(m+n)/(mn); kron 2 nb z^2/(mn) == 2k/sqrt(mn) when mn = nb z^4
    m, n = 64 * 3, 32 * 3
    lp = plan_at_rho(nn.Sequential(nn.Linear(2, 2), nn.Linear(n, m), nn.Linear(2, 2)), "mat", "ab", 0.05).layers[0]
    assert lp.payload / (m * n) == lp.rank * (m + n) / (m * n)
    nb, z = 4, 6  # N = nb z^4
    lin = nn.Linear(z**2 * 2, z**2 * 2 * nb // 4 * 2)  # m*n = 72*144 = 10368 = 8 * 6^4
    numel = lin.weight.numel()
    nb8, z8 = bkd_blocks(numel, math.sqrt(4 * 8 / numel) * 0.999999)
    assert (nb8, z8) == (8, 6)
    assert 2 * nb8 * z8**2 / numel == pytest.approx(2 * math.sqrt(nb8) / math.sqrt(numel))


def test_bad_ratio_errors():
    for bad in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="target_ratio must be in"):
            plan_model(model("fmnist"), "kron", "aad", bad)
    plan_model(model("fmnist"), "kron", "aad", 1.0)  # upper bound allowed


def test_unreachable_ratio_states_smallest_ratio():
    floor = smallest_reachable_ratio(model("svhn"), "kron", "aad")
    assert round(floor, 5) == 0.03528
    with pytest.raises(UnreachableRatioError, match=r"smallest reachable ratio is 0\.03528"):
        plan_model(model("svhn"), "kron", "aad", 1 / 32)
    with pytest.raises(UnreachableRatioError, match="smallest reachable"):
        plan_model(model("fmnist"), "kron", "aad", 0.01)
    # a reachable target just above the floor works
    assert plan_model(model("svhn"), "kron", "aad", 0.035).ratio <= 0.036


def test_layer_shape_errors_name_the_layer():
    net = nn.Sequential(nn.Conv2d(4, 8, 3), nn.Conv2d(8, 8, 3, groups=2), nn.Flatten(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"layer '1' is a grouped convolution"):
        plan_model(net, "kron", "aad", 0.5)
    with pytest.raises(ValueError, match=r"layer '2' of type Flatten cannot be decomposed"):
        plan_model(net, "mat", "ab", 0.5, include=["2"])
    with pytest.raises(ValueError, match=r"layer 'nope' not found"):
        plan_model(net, "mat", "ab", 0.5, include=["nope"])


def test_bad_decomp_pattern():
    with pytest.raises(ValueError, match="decomp must be one of"):
        plan_model(model("fmnist"), "svd", "ab")
    with pytest.raises(ValueError, match="pattern must be one of"):
        plan_model(model("fmnist"), "mat", "lora")


def test_non_square_kernel_view():
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Conv2d(3, 5, (2, 4)), nn.Linear(2, 2))
    (name, mod), = compressible_layers(net)
    lp = plan_at_rho(net, "mat", "ab", 0.5).layers[0]
    assert (lp.m, lp.n) == (5 * 2, 3 * 4)
    assert torch.Size(lp.shape) == mod.weight.shape
