"""Issue 26, "the client owns its privacy": a DO-ADP-family client checks the noise the server asks
for against its own budget, its seed's strength is its bits, and its replies say nothing of its seed.

- A server instruction with a lower sigma or a larger clip than the client's own budget needs is
  refused by the client, naming both values: through a real Grid (the Message-API strategy on an
  :class:`InProcessGrid` whose server tampers with its own instructions, and a server honestly
  configured with a larger epsilon), and in the project's app (node config budget).
- Brute-forcing node seeds 0..2**16 recovers none of 16 noise vectors drawn from node-config seeds;
  a node-config seed below 128 bits (the issue's 11..14) is refused.
- The step-size rule (noise norm per step ``lr * sigma * sqrt(d)`` <= 2): one warning at the first
  step that breaks it, naming lr, sigma, d and the bound.

``tests/test_privacy_doadp_deployment.py`` shows the refusal on a real SuperLink with SuperNodes.
"""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import json
import re
import warnings

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.app import message_config, partition_query, train_reply
from flwr_strategies.clients.doadp import (
    ClientBudget,
    DOADPAgent,
    DOADPClient,
    StepSizeWarning,
    check_gaussian_noise,
    client_budget_of,
    flat_parameters,
)
from flwr_strategies.clients.doadp_baselines import CPGTClient, DPDDAClient, DPDOClient
from flwr_strategies.clients.training import TensorData
from flwr_strategies.doadp.rng import agent_generator, draw_batch
from flwr_strategies.doadp.serverapp import DOADP
from flwr_strategies.privacy.accountant import GaussianSteps, calibrate_sigma
from flwr_strategies.setup import ClientSetup, TrainConfig
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

F, C, Q, B, ROUNDS = 5, 3, 40, 8, 3
BUDGET = ClientBudget(epsilon=1.0, rounds=ROUNDS)
NODE_BUDGET = {"doadp-epsilon": 1.0, "doadp-rounds": ROUNDS}


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(F, C)


def _data(seed=0, n=Q):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, F, generator=g), torch.randint(0, C, (n,), generator=g)


def _node_seed(i: int) -> str:
    return f"{0xC0FFEE << 100 | (7919 * (i + 1)):032x}"


def _config(t=0, sigma=5.0, clip=1.0, alpha=0.05, p=1.0):
    return {"t": t, "doadp_private": 1, "doadp_alpha": alpha, "doadp_beta": 0.15, "doadp_p": p, "doadp_k": 5,
            "doadp_sigma": sigma, "doadp_clip": clip, "doadp_clip_mode": "coordinate", "doadp_batch_size": B,
            "doadp_sampling": "uniform", "doadp_msg_dtype": "float32", "doadp_public_copy": "zero",
            "doadp_accepted": t, "report_model": 0}


def _own_sigma(clip=1.0, q=Q):
    return calibrate_sigma(BUDGET.epsilon, BUDGET.delta, BUDGET.rounds, clip, B, q, "uniform")


# ------------------------------------------------------------------------------ the check itself
def test_the_client_floor_is_the_accountants_calibration():
    own = _own_sigma()
    # the calibrated sigma certifies the budget, and is what the client names when it refuses
    assert GaussianSteps(own, 1.0, B, Q).epsilon(ROUNDS, 1e-5) <= 1.0
    check_gaussian_noise(BUDGET, own, 1.0, B, Q)
    check_gaussian_noise(BUDGET, own / 2, 0.5, B, Q)  # half the clip needs half the noise: accepted
    with pytest.raises(ValueError, match=rf"sigma={own * 0.9:.6g} .*above its own epsilon=1; its own budget "
                                         rf"needs sigma >= {own:.6g}"):
        check_gaussian_noise(BUDGET, own * 0.9, 1.0, B, Q)
    with pytest.raises(ValueError, match="clip=2 is larger than the client's own clip=1"):
        check_gaussian_noise(BUDGET, own * 10, 2.0, B, Q)


@pytest.mark.parametrize("sigma, clip, match", [
    (1e-12, 1.0, r"sigma=1e-12 .*needs sigma >= "),
    (5.0, 1e6, r"clip=1e\+06 is larger than the client's own clip=1"),
    (1e-12, 1e6, r"clip=1e\+06 is larger"),
])
def test_the_agent_refuses_less_noise_than_its_budget_before_any_work(sigma, clip, match):
    state = RecordDict()
    x0 = flat_parameters(_model())
    agent = DOADPAgent([np.zeros_like(x0), x0], _config(sigma=sigma, clip=clip), state, budget=BUDGET)
    with pytest.raises(ValueError, match=match):
        agent.train(_model(), TensorData(*_data()))
    assert "doadp" not in state  # nothing trained, nothing saved


def test_the_agent_refuses_rounds_beyond_its_budget_and_without_one():
    x0 = flat_parameters(_model())
    state = RecordDict()
    for t in range(ROUNDS):  # the rounds it agreed to
        agent = DOADPAgent([np.zeros_like(x0)] + ([x0] if t == 0 else []), _config(t=t), state, budget=BUDGET)
        agent.train(_model(), TensorData(*_data()))
        agent.save(state)
    with pytest.raises(ValueError, match="agreed to 3 rounds.*this would be round 4"):
        DOADPAgent([np.zeros_like(x0)], _config(t=ROUNDS), state, budget=BUDGET)
    # a server replaying an early iteration number does not get more rounds: the client counts its own
    with pytest.raises(ValueError, match="agreed to 3 rounds.*rounds the client took part in: 3"):
        DOADPAgent([np.zeros_like(x0)], _config(t=0), state, budget=BUDGET)
    with pytest.raises(ValueError, match="no privacy budget of its own.*doadp-epsilon"):
        DOADPAgent([np.zeros_like(x0), x0], _config(), RecordDict())


def test_budget_sources_and_bad_budgets():
    assert client_budget_of(None, NODE_BUDGET) == BUDGET
    assert client_budget_of(None, {**NODE_BUDGET, "doadp-delta": 1e-6, "doadp-clip": 0.5}) == ClientBudget(
        1.0, ROUNDS, 1e-6, 0.5)
    assert client_budget_of(None, {"partition-id": 0}) is None
    with pytest.raises(ValueError, match="doadp-rounds"):
        client_budget_of(None, {"doadp-epsilon": 1.0})
    with pytest.raises(ValueError, match="doadp-epsilon.*must be a number"):
        client_budget_of(None, {"doadp-epsilon": "one", "doadp-rounds": 3})
    with pytest.raises(ValueError, match="epsilon must be > 0, got 0.0"):
        client_budget_of(None, {"doadp-epsilon": 0.0, "doadp-rounds": 3})
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        ClientBudget(1.0, 0)


def _setup(state, seed=0):
    return ClientSetup(0, 1, _model(), TensorData(*_data(seed)), None, TrainConfig(), torch.device("cpu"), 0, state)


def _baseline_config(t=0, **over):
    return {"t": t, "bl_init": 1, "bl_batch_size": B, "bl_clip": 1.0, "bl_clip_mode": "coordinate",
            "bl_sampling": "uniform", "report_model": 0, **over}


@pytest.mark.parametrize("client_cls, config, match", [
    (DPDDAClient, {"dpdda_p_s": 1.0, "dpdda_sigma": 1e-3, "dpdda_reg": 0.01, "dpdda_beta0": 100.0},
     r"DP-DDA client refuses the round: the server's sigma=0.001 .*needs sigma >= "),
    (DPDOClient, {"dpdo_c": 0.05, "dpdo_rs": 0.99, "dpdo_rn": 0.995, "dpdo_b0": 1e-6},
     r"DPDO client refuses the round: the server's Laplace scale b0=1e-06 .*needs b0 >= "),
    (CPGTClient, {"cpgt_k": 3, "cpgt_lr": 0.05, "cpgt_rs": 0.999, "cpgt_rn": 0.9995, "cpgt_b0": 1e-6,
                  "cpgt_g_cons": 0.05}, r"CPGT client refuses the round: the server's Laplace scale b0=1e-06 "),
    (DPDDAClient, {"bl_clip": 1e6, "dpdda_p_s": 1.0, "dpdda_sigma": 1e3, "dpdda_reg": 0.01, "dpdda_beta0": 100.0},
     r"DP-DDA client refuses the round: the server's clip=1e\+06 is larger than the client's own clip=1"),
])
def test_the_baselines_refuse_noise_below_their_budget(client_cls, config, match):
    state = RecordDict()
    setup = _setup(state)
    x0 = flat_parameters(setup.model)
    arrays = {DPDDAClient: [np.zeros_like(x0), x0], DPDOClient: [x0],
              CPGTClient: [x0, np.zeros_like(x0), np.zeros_like(x0)]}[client_cls]
    with pytest.raises(ValueError, match=match):
        client_cls(setup, {}, budget=BUDGET).fit(arrays, _baseline_config(**config))
    assert not [k for k in state.keys() if k in ("dpdda", "dpdo", "cpgt")]  # nothing trained, nothing saved


def test_the_baselines_accept_the_servers_own_calibration():
    # the noise the baseline servers calibrate for (epsilon 1 over the client's rounds) passes the client's check
    from flwr_strategies.privacy.laplace import calibrate_laplace_b0

    setup = _setup(RecordDict())
    x0 = flat_parameters(setup.model)
    d = x0.size
    t = np.arange(1, ROUNDS, dtype=np.float64)
    sens = 2.0 * np.sqrt(d) * 0.05 * 0.99 ** (t - 1) / B
    b0 = calibrate_laplace_b0(1.0, sens, 0.995**t, B / Q)
    config = _baseline_config(dpdo_c=0.05, dpdo_rs=0.99, dpdo_rn=0.995, dpdo_b0=b0)
    arrays, n, _ = DPDOClient(setup, {}, budget=BUDGET).fit([x0], config)
    assert n == Q and len(arrays) == 1
    with pytest.raises(ValueError, match=f"b0={b0 * 0.99:.6g} .*needs b0 >= {b0:.6g}"):
        DPDOClient(_setup(RecordDict()), {}, budget=BUDGET).fit([x0], {**config, "dpdo_b0": b0 * 0.99})


# ------------------------------------------------------------------------------ through a real Grid
def user_client_app() -> ClientApp:
    """A quickstart-style ClientApp: the user's own model and DataLoader; the budget from its node config."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model = _model()
        x, y = _data(seed=10 + int(context.node_config["partition-id"]))
        loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
        agent = DOADPAgent(msg.content["arrays"].to_numpy_ndarrays(), message_config(msg), context.state,
                           node_config=context.node_config)
        arrays, metrics = agent.train(model, loader)
        agent.save(context.state)
        return train_reply(msg, context, arrays, len(loader.dataset), metrics)

    app.query("partition")(partition_query)
    return app


class TamperingGrid(InProcessGrid):
    """A grid whose server rewrites its own train instructions (``tamper``) and records the replies."""

    def __init__(self, *a, tamper=None, **kw):
        super().__init__(*a, **kw)
        self.tamper, self.replies = tamper or {}, []

    def push_messages(self, messages):
        messages = list(messages)
        for m in messages:
            if "config" in m.content and "doadp_sigma" in m.content["config"]:
                for key, value in self.tamper.items():
                    m.content["config"][key] = value
        return super().push_messages(messages)

    def pull_messages(self, ids):
        out = list(super().pull_messages(ids))
        self.replies.extend(out)
        return out


def _serve(tamper=None, epsilon=1.0, calibration="theorem1", nodes=3):
    grid = TamperingGrid(user_client_app(), nodes, tamper=tamper)
    for ctx in grid.contexts.values():
        ctx.node_config.update(NODE_BUDGET)
    strategy = DOADP(local_dataset_size=Q, num_rounds=ROUNDS, lr=0.05, batch_size=B, epsilon=epsilon,
                     calibration=calibration, k_frac=0.3, min_available_nodes=nodes)
    try:
        strategy.start(grid=grid, initial_arrays=ArrayRecord(_model().state_dict()), num_rounds=ROUNDS)
    except Exception as err:  # a run in which every client refused may stop (that is the runner's business)
        print(f"start() raised {type(err).__name__}: {err}")
    train = [m for m in grid.replies if m.metadata.message_type.startswith("train")]
    return train, strategy


def test_an_honest_server_with_the_clients_budget_trains():
    replies, strategy = _serve()
    assert len(replies) == 3 * ROUNDS and not [m for m in replies if m.has_error()]
    assert all(set(m.content["metrics"].keys()) >= {"doadp_active"} for m in replies)
    assert not [k for m in replies for k in m.content["metrics"].keys() if "seed" in k]  # nothing about seeding


@pytest.mark.parametrize("tamper, match", [
    ({"doadp_sigma": 1e-12, "doadp_clip": 1e6}, r"the server's clip=1e\+06 is larger than the client's own clip=1"),
    ({"doadp_sigma": 1e-12}, r"the server's sigma=1e-12 .*above its own epsilon=1; its own budget needs sigma >= "),
])
def test_a_server_sending_less_noise_is_refused_through_a_real_grid(tamper, match):
    replies, strategy = _serve(tamper)
    assert replies and all(m.has_error() for m in replies)  # every client refused, every round
    assert all(re.search(match, m.error.reason) for m in replies), replies[0].error.reason
    assert not strategy.core.XHAT.any()  # no message was ever applied


def test_a_server_calibrated_for_a_larger_epsilon_is_refused_naming_both_sigmas():
    # an honest-looking server whose own target is epsilon 20 (its sigma certifies 20, not the nodes' 1)
    replies, strategy = _serve(epsilon=20.0, calibration="accountant")
    server_sigma = strategy.core.sigma
    assert replies and all(m.has_error() for m in replies)
    reason = replies[0].error.reason
    own = _own_sigma(q=Q)
    assert f"sigma={server_sigma:.6g}" in reason and f"needs sigma >= {own:.6g}" in reason, reason
    assert server_sigma < own


def test_the_projects_app_refuses_a_server_below_the_nodes_budget(tmp_path):
    # the project's runner: each node's budget from its node config; the run config (the server's)
    # asks for epsilon 20, so every node refuses every round and no update is ever applied
    rc = {"method": "doadp", "num-clients": 3, "num-server-rounds": 2, "dataset": "digits", "seed": 0,
          "set": "epsilon=20,calibration=accountant", "out-dir": str(tmp_path)}
    grid = TamperingGrid(project_app.client_app, 3, run_config=rc)
    for ctx in grid.contexts.values():
        ctx.node_config.update({"doadp-epsilon": 1.0, "doadp-rounds": 2})
    try:
        project_app.serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    except Exception as err:
        print(f"serve() raised {type(err).__name__}: {err}")
    train = [m for m in grid.replies if m.metadata.message_type.startswith("train")]
    assert train and all(m.has_error() and "DO-ADP client refuses the round: the server's sigma=" in m.error.reason
                         for m in train), [m.error.reason for m in train if m.has_error()][:1]
    if (tmp_path / "results.json").exists():
        rounds = json.loads((tmp_path / "results.json").read_text())["rounds"]
        assert all(r["failures"] == 3 for r in rounds[1:]), rounds


# ------------------------------------------------------------------------------ seeds
def test_brute_forcing_small_node_seeds_recovers_no_noise_vector(monkeypatch):
    import flwr_strategies.doadp.algorithm as algorithm

    noises = []
    real = algorithm.noisy_gradient

    def spy(grads, params, rng, d):  # the noise the client applies (client side only, never sent)
        g, noise = real(grads, params, rng, d)
        noises.append(noise.copy())
        return g, noise

    monkeypatch.setattr(algorithm, "noisy_gradient", spy)
    nodes, rounds = 8, 2
    x0 = flat_parameters(_model())
    states = [RecordDict() for _ in range(nodes)]
    for t in range(rounds):
        for i, state in enumerate(states):
            node = {"doadp-client-seed": _node_seed(i), **NODE_BUDGET}
            agent = DOADPAgent([np.zeros_like(x0)] + ([x0] if t == 0 else []), _config(t=t), state, node_config=node)
            _, metrics = agent.train(_model(), TensorData(*_data(seed=i)))
            agent.save(state)
            assert set(metrics) == {"doadp_active", "train_loss"}  # nothing about how the noise was seeded
    assert len(noises) == 16

    def replay(seed, t):  # the client's draw order: coin, batch, noise
        g = agent_generator(seed, t)
        g.random()
        draw_batch(g, Q, B)
        return g.normal(0.0, 1.0, size=8)

    def recovered(seeds):
        hits = 0
        for t in range(rounds):
            guesses = np.array([replay(s, t) for s in seeds])
            for noise in noises[t * nodes:(t + 1) * nodes]:
                ratio = noise[:8] / guesses  # the same standard normals, scaled by sigma
                hits += bool(np.any(np.all(np.isclose(ratio, ratio[:, :1], rtol=1e-9), axis=1)))
        return hits

    assert recovered(range(2**16)) == 0
    assert recovered([int(_node_seed(i), 16) for i in range(nodes)]) == 16  # control: the attack can succeed


@pytest.mark.parametrize("seed", [11, 12, 13, 14, "11", f"{14:032x}"])
def test_a_small_node_config_seed_is_refused(seed):
    x0 = flat_parameters(_model())
    node = {"doadp-client-seed": seed, **NODE_BUDGET}
    match = "doadp-client-seed.*at least 128 bits.*found by trying every value"
    with pytest.raises(ValueError, match=match):
        DOADPAgent([np.zeros_like(x0), x0], _config(), RecordDict(), node_config=node)
    setup = _setup(RecordDict())
    setup.node_config = node
    with pytest.raises(ValueError, match=match):
        DOADPClient(setup, {})
    with pytest.raises(ValueError, match=match):
        DPDDAClient(setup, {})


# ------------------------------------------------------------------------------ step size
def test_one_step_size_warning_at_the_first_step_that_breaks_the_rule():
    x0 = flat_parameters(_model())
    d = x0.size
    sigma = _own_sigma()
    bound = 2.0 / (sigma * np.sqrt(d))
    state = RecordDict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t, alpha in enumerate([bound * 0.9, bound * 1.5, bound * 2.0]):
            cfg = _config(t=t, sigma=sigma, alpha=alpha)
            agent = DOADPAgent([np.zeros_like(x0)] + ([x0] if t == 0 else []), cfg, state, budget=BUDGET)
            agent.train(_model(), TensorData(*_data()))
            agent.save(state)
            if t == 0:
                assert not [w for w in caught if issubclass(w.category, StepSizeWarning)]  # below the bound
    hits = [w for w in caught if issubclass(w.category, StepSizeWarning)]
    assert len(hits) == 1, [str(w.message) for w in hits]
    msg = str(hits[0].message)
    assert f"lr={bound * 1.5:g}" in msg and f"sigma={sigma:.4g}" in msg and f"d={d}" in msg
    assert f"choose lr below 2 / (sigma sqrt(d)) = {bound:.3g}" in msg
