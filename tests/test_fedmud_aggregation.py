"""Aggregation oracles of FedMUD (spec 004, Section 9.3): AAD / +F factor averaging equals update
averaging exactly; direct averaging of ``ab`` factors is biased."""

import copy

import numpy as np
import pytest
import torch

from fedmud_testmodels import tiny_net
from flwr_strategies.fedmud import DecomposedModel, aggregation_weights, plan_at_rho, weighted_mean


def test_bias_counter_example():
    u1, v1 = np.array([[1.0], [0.0]]), np.array([[1.0, 0.0]])
    u2, v2 = np.array([[0.0], [1.0]]), np.array([[0.0, 1.0]])
    mean_of_products = (u1 @ v1 + u2 @ v2) / 2
    product_of_means = ((u1 + u2) / 2) @ ((v1 + v2) / 2)
    assert np.array_equal(mean_of_products, [[0.5, 0.0], [0.0, 0.5]])
    assert np.array_equal(product_of_means, [[0.25, 0.25], [0.25, 0.25]])


def _clients(decomp, pattern, k, seed=0):
    """K replicas sharing base and frozen factors (same seed) with client-specific random trainables."""
    torch.manual_seed(seed)
    net = tiny_net()
    reps = [DecomposedModel(copy.deepcopy(net), plan_at_rho(net, decomp, pattern, 0.5), seed=11) for _ in range(k)]
    g = torch.Generator().manual_seed(seed + 1)
    for dm in reps:
        with torch.no_grad():
            for _, deco in dm.decompositions():
                for p in deco.parameters():
                    p.copy_(torch.randn(p.shape, generator=g))
    return reps


def _factor_payload(dm):
    return [p.detach().numpy().copy() for _, d in dm.decompositions() for p in d.parameters()]


def _aggregate_deltas(reps, weights):
    """(dW of the averaged trainables, weighted mean of the clients' dW) per layer."""
    avg = weighted_mean([_factor_payload(dm) for dm in reps], weights)
    server = copy.deepcopy(reps[0])
    with torch.no_grad():
        it = iter(avg)
        for _, deco in server.decompositions():
            for p in deco.parameters():
                p.copy_(torch.as_tensor(next(it)))
    out = []
    for li, (_, deco) in enumerate(server.decompositions()):
        mean_delta = sum(w * dm.decompositions()[li][1].delta_matrix().detach().double() for w, dm in zip(weights, reps))
        out.append((deco.delta_matrix().detach().double(), mean_delta))
    return out


@pytest.mark.parametrize("decomp", ["mat", "kron"])
@pytest.mark.parametrize("pattern", ["aad", "freeze"])
def test_linear_patterns_aggregate_exactly(decomp, pattern):
    reps = _clients(decomp, pattern, 4)
    weights = aggregation_weights([10, 30, 25, 35])
    for got, want in _aggregate_deltas(reps, weights):
        assert torch.allclose(got, want, atol=1e-5 * max(1.0, want.abs().max().item()))


@pytest.mark.parametrize("decomp", ["mat", "kron"])
def test_plain_pattern_aggregation_is_biased(decomp):
    reps = _clients(decomp, "ab", 4)
    weights = aggregation_weights([10, 30, 25, 35])
    for got, want in _aggregate_deltas(reps, weights):
        assert (got - want).abs().max() > 1e-2 * want.abs().max()


@pytest.mark.parametrize("decomp,pattern", [(d, p) for d in ("mat", "kron") for p in ("ab", "freeze", "aad")])
def test_single_client_is_exact(decomp, pattern):
    reps = _clients(decomp, pattern, 1)
    for got, want in _aggregate_deltas(reps, [1.0]):
        assert torch.allclose(got, want, atol=1e-6 * max(1.0, want.abs().max().item()))


def test_weights():
    w = aggregation_weights([1, 3, 4])
    assert w.sum() == pytest.approx(1.0) and np.allclose(w, [0.125, 0.375, 0.5])
    u = aggregation_weights([1, 3, 4], "uniform")
    assert np.allclose(u, 1 / 3)
    arrays = [[np.array([1.0, 2.0])], [np.array([3.0, 6.0])], [np.array([5.0, 1.0])]]
    assert np.allclose(weighted_mean(arrays, u)[0], np.mean([a[0] for a in arrays], axis=0))
    with pytest.raises(ValueError, match="weighting must be one of"):
        aggregation_weights([1], "median")
    with pytest.raises(ValueError, match="positive sum"):
        aggregation_weights([0, 0])
