"""The DO-ADP baselines' client pieces on the user's own model and data (issue 27).

``DPDOAgent``, ``DPDDAAgent``, ``CPGTAgent`` and ``DMSGDAgent`` run on any ``torch.nn.Module`` and
any iterable of ``(x, y)`` batches. Oracles: a linear model ``w . x`` with the loss
``(w . x - y)^2 / 2`` has the per-sample gradient ``(w . x - y) x`` in closed form, and each agent's
round must equal the per-agent function of :mod:`flwr_strategies.doadp.baselines` (the reduced
method, no torch) fed that closed form and the same client-side generator, over two rounds (the
first from x0, the second from the agent's state in ``context.state``). D-mSGD's round is checked
against its closed form ``x1 = x0 - alpha mean_i (w0 . x_i - y_i) x_i + cons``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import RecordDict

from flwr_strategies.clients.doadp import private_generator
from flwr_strategies.clients.doadp_baselines import (
    ClientBudget,
    CPGTAgent,
    DMSGDAgent,
    DPDDAAgent,
    DPDOAgent,
    IndexedData,
)
from flwr_strategies.doadp.baselines import BatchGrad, cpgt_round, dpdda_round, dpdo_round

D, Q, SEED = 5, 24, 12345
RNG = np.random.default_rng(0)
X = RNG.normal(size=(Q, D))
Y = X @ RNG.normal(size=D) + 0.1 * RNG.normal(size=Q)
#: the user's data: a list of (x, y) batches of 8 (any iterable of batches)
BATCHES = [(torch.from_numpy(X[i:i + 8]), torch.from_numpy(Y[i:i + 8])) for i in range(0, Q, 8)]
BATCH = {"bl_batch_size": 6, "bl_clip": 1.0, "bl_clip_mode": "l2", "bl_sampling": "uniform"}
BUDGET = ClientBudget(epsilon=8.0, rounds=2)


def squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((out[:, 0] - y) ** 2).sum()


def user_model() -> torch.nn.Module:
    return torch.nn.Linear(D, 1, bias=False, dtype=torch.float64)


def closed_form_grads(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per-sample gradients of ``(w . x_i - y_i)^2 / 2`` at ``w = x``: ``(w . x_i - y_i) x_i``."""
    return (X[idx] @ x - Y[idx])[:, None] * X[idx]


def bg() -> BatchGrad:
    return BatchGrad(BATCH["bl_batch_size"], BATCH["bl_clip"], BATCH["bl_clip_mode"], BATCH["bl_sampling"])


def run(agent_cls, arrays, config, state):
    agent = agent_cls(arrays, config, state, client_seed=SEED, budget=BUDGET)
    out, metrics = agent.train(user_model(), BATCHES, squared_error)
    agent.save(state)
    return out, metrics


def test_dpdo_agent_equals_the_reduced_method_with_closed_form_gradients():
    config = {**BATCH, "dpdo_c": 0.3, "dpdo_rs": 0.99, "dpdo_b0": 50.0, "dpdo_rn": 0.995}
    state, x0 = RecordDict(), RNG.normal(size=D)
    (y1,), _ = run(DPDOAgent, [x0], {**config, "t": 0, "bl_init": 1}, state)
    x1, y1_ref = dpdo_round(x0, None, 0, c=0.3, rs=0.99, b0=50.0, rn=0.995, rng=private_generator(SEED, 0),
                            grad_fn=closed_form_grads, q=Q, bg=bg())
    np.testing.assert_allclose(y1, y1_ref, rtol=1e-12)
    z = RNG.normal(size=D)  # the mixed broadcasts of round 1
    (y2,), _ = run(DPDOAgent, [z], {**config, "t": 1}, state)
    _, y2_ref = dpdo_round(x1, z, 1, c=0.3, rs=0.99, b0=50.0, rn=0.995, rng=private_generator(SEED, 1),
                           grad_fn=closed_form_grads, q=Q, bg=bg())
    np.testing.assert_allclose(y2, y2_ref, rtol=1e-12)
    assert not np.allclose(y2, z)  # the round moved the agent


def test_dpdda_agent_equals_the_reduced_method_with_closed_form_gradients():
    config = {**BATCH, "dpdda_p_s": 1.0, "dpdda_sigma": 40.0, "dpdda_reg": 0.01, "dpdda_beta0": 2.0}
    state, x0, mixed = RecordDict(), RNG.normal(size=D), RNG.normal(size=D)
    (z1,), metrics = run(DPDDAAgent, [mixed, x0], {**config, "t": 0}, state)
    x1, z1_ref, sampled = dpdda_round(x0, mixed, 0, p_s=1.0, sigma=40.0, reg=0.01, beta0=2.0,
                                      rng=private_generator(SEED, 0), grad_fn=closed_form_grads, q=Q, bg=bg())
    np.testing.assert_allclose(z1, z1_ref, rtol=1e-12)
    assert metrics["dpdda_sampled"] == int(sampled) == 1
    mixed2 = RNG.normal(size=D)
    (z2,), _ = run(DPDDAAgent, [mixed2], {**config, "t": 1}, state)
    _, z2_ref, _ = dpdda_round(x1, mixed2, 1, p_s=1.0, sigma=40.0, reg=0.01, beta0=2.0,
                               rng=private_generator(SEED, 1), grad_fn=closed_form_grads, q=Q, bg=bg())
    np.testing.assert_allclose(z2, z2_ref, rtol=1e-12)


def test_cpgt_agent_equals_the_reduced_method_with_closed_form_gradients():
    hyper = {"cpgt_k": 3, "cpgt_lr": 0.1, "cpgt_rs": 0.999, "cpgt_g_cons": 0.05, "cpgt_b0": 60.0, "cpgt_rn": 0.9995}
    kw = dict(k=3, lr=0.1, rs=0.999, g_cons=0.05, b0=60.0, rn=0.9995, grad_fn=closed_form_grads, q=Q, bg=bg(),
              msg_dtype="float64")
    state, x0, h_x, h_y = RecordDict(), RNG.normal(size=D), RNG.normal(size=D), RNG.normal(size=D)
    out1, _ = run(CPGTAgent, [x0, h_x, h_y], {**BATCH, **hyper, "t": 0, "bl_init": 1}, state)
    x1, y1, mx, my = cpgt_round(x0, None, None, h_x, h_y, 0, rng=private_generator(SEED, 0), **kw)
    for got, ref in zip(out1, [*mx, *my]):
        np.testing.assert_allclose(got, ref, rtol=1e-12)
    completion = [RNG.normal(size=D) for _ in range(4)]
    h2 = [RNG.normal(size=D), RNG.normal(size=D)]
    out2, _ = run(CPGTAgent, [*completion, *h2], {**BATCH, **hyper, "t": 1}, state)
    _, _, mx2, my2 = cpgt_round(x1, y1, tuple(completion), *h2, 1, rng=private_generator(SEED, 1), **kw)
    for got, ref in zip(out2, [*mx2, *my2]):
        np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_dmsgd_agent_takes_the_closed_form_momentum_step():
    """p = 1, k = d, no noise, no clip, the whole local set as the batch: one D-mSGD step from x0 is
    ``x0 - alpha * mean_i grad_i(x0) + cons``; the agent reports it (private model, with consent)
    and its Top-d message carries it whole."""
    alpha, x0, cons = 0.2, RNG.normal(size=D), RNG.normal(size=D)
    config = {"t": 0, "report_model": 1, "doadp_private": 0, "doadp_alpha": alpha, "doadp_beta": 0.15,
              "doadp_p": 1.0, "doadp_k": D, "doadp_sigma": 0.0, "doadp_clip": -1.0, "doadp_clip_mode": "l2",
              "doadp_batch_size": Q, "doadp_sampling": "uniform", "doadp_msg_dtype": "float64",
              "doadp_public_copy": "zero"}
    state = RecordDict()
    agent = DMSGDAgent([cons, x0], config, state, client_seed=SEED, allow_private_eval=True)
    (idx, val, x1), metrics = agent.train(user_model(), IndexedData(BATCHES), squared_error)
    expected = x0 - alpha * closed_form_grads(x0, np.arange(Q)).mean(axis=0) + cons
    np.testing.assert_allclose(x1, expected, rtol=1e-12)
    sent = np.zeros(D)
    sent[idx] = val
    np.testing.assert_allclose(sent, expected, rtol=1e-12)  # public copy 0: the message is x1 itself
    assert metrics["doadp_active"] == 1
    with pytest.raises(ValueError, match="server runs a private method"):
        DMSGDAgent([cons, x0], {**config, "doadp_private": 1}, state, client_seed=SEED)


def test_baseline_agent_refuses_without_a_budget_or_with_less_noise_than_its_budget():
    config = {**BATCH, "t": 0, "bl_init": 1, "dpdo_c": 0.3, "dpdo_rs": 0.99, "dpdo_b0": 50.0, "dpdo_rn": 0.995}
    with pytest.raises(ValueError, match="DPDO"):  # no budget anywhere: no private round
        DPDOAgent([np.zeros(D)], config, RecordDict(), client_seed=SEED)
    state = RecordDict()
    agent = DPDOAgent([np.zeros(D)], {**config, "dpdo_b0": 1e-3}, state, client_seed=SEED, budget=BUDGET)
    with pytest.raises(ValueError, match=r"DPDO client refuses the round: the server's Laplace scale b0=0.001"):
        agent.train(user_model(), BATCHES, squared_error)
    assert "dpdo" not in state  # nothing committed
