"""Issue 13, privacy: a DO-ADP client's noise and activation coin come from randomness only it holds.

- Everything the server sends or receives (captured on the wire of a Message-API run) does not let
  it regenerate a client's noise, with any generator seeded from any number it saw; the same attack
  succeeds when a client's seed is something the server knows (so the test can fail).
- Two runs with the same experiment seed and no client-side seed draw different noise and coins;
  with a client-side seed (a per-node secret in ``context.state``) they are bit-identical.
- The server sends no activation decision; it learns activation from the replies.
"""

import copy
import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import itertools

import numpy as np
import pytest
from flwr.app import ArrayRecord

import flwr_strategies.doadp.algorithm as algorithm
from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.clients.doadp import set_client_seed
from flwr_strategies.doadp.rng import agent_generator, draw_batch
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

N, ROUNDS = 3, 3
_REAL_NOISY_GRADIENT = algorithm.noisy_gradient


class WireGrid(InProcessGrid):
    """An in-process grid that records every message crossing the wire (the server's whole view)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.sent, self.received = [], []

    def push_messages(self, messages):
        messages = list(messages)
        self.sent.extend(messages)
        return super().push_messages(messages)

    def pull_messages(self, ids):
        out = list(super().pull_messages(ids))
        # copies as they crossed the wire: a decentralized strategy empties the arrays of the replies
        # its tables have taken (Flower's start() would otherwise keep them for a round)
        self.received.extend(copy.deepcopy(m) for m in out)
        return out


def _run(monkeypatch, client_seed_base=None, seed=0):
    cfg = ExperimentConfig(method="doadp", dataset="digits", num_clients=N, rounds=ROUNDS, seed=seed, lr=0.05,
                           local_steps=1, batch_size=4, model="logreg", progress=False,
                           params={"eval_every": 1, "p": 0.6})
    exp = get_experiment(cfg)
    noises = []
    real = _REAL_NOISY_GRADIENT

    def spy(grads, params, rng, d):  # client-side ground truth, never sent anywhere
        g, noise = real(grads, params, rng, d)
        noises.append(noise.copy())
        return g, noise

    monkeypatch.setattr(algorithm, "noisy_gradient", spy)
    model = exp.model_fn()
    grid = WireGrid(numpy_client_app(lambda ctx: exp.build_client(ctx, model)), N)
    if client_seed_base is not None:
        for ctx in grid.contexts.values():
            set_client_seed(ctx.state, client_seed_base + int(ctx.node_config["partition-id"]))
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
                   num_rounds=ROUNDS)
    return noises, grid, strategy


def _server_view_integers(grid):
    """Every integer (or integral float) the server sent or received, including array contents."""
    seen = set()
    for msg in grid.sent + grid.received:
        if msg.has_error():
            continue
        content = msg.content
        for rec in list(content.config_records.values()) + list(content.metric_records.values()):
            for v in rec.values():
                for x in v if isinstance(v, list) else [v]:
                    if isinstance(x, (int, float)) and float(x).is_integer() and abs(x) < 2**63:
                        seen.add(int(x))
        for rec in content.array_records.values():
            for a in rec.to_numpy_ndarrays():
                if a.dtype.kind in "iu" and a.size:
                    seen.update(int(v) for v in a.ravel()[:64])
    seen.update({0, 1, 2, 3})
    return {s for s in seen if s >= 0}


def _attack(noises, candidates, rounds, qs, b):
    """Try every generator the server could build from the numbers it saw, replaying the client's
    draw order (coin, batch, noise); True if one reproduces a client's noise."""
    targets = [n[:8] for n in noises]

    def hits(make):
        for q in qs:
            g = make()
            g.random()
            draw_batch(g, q, b)
            guess = g.normal(0.0, 1.0, size=8)
            for target in targets:
                ratio = target / guess
                if np.allclose(ratio, ratio[0], rtol=1e-9):
                    return True
        return False

    for s, t in itertools.product(candidates, range(rounds)):
        makers = [lambda: agent_generator(s, t), lambda: np.random.default_rng(s), lambda: np.random.default_rng([s, t])]
        makers += [(lambda i: lambda: np.random.default_rng([0xA6E, s, t, i]))(i) for i in range(N)]  # old scheme
        if any(hits(m) for m in makers):
            return True
    return False


def test_server_cannot_regenerate_noise(monkeypatch):
    noises, grid, strategy = _run(monkeypatch)
    assert noises, "no agent was active"
    # the server never sends a seed or an activation decision
    for msg in grid.sent:
        cfg = dict(msg.content["config"])
        assert not {"seed", "doadp_seed", "active"} & set(cfg), sorted(cfg)
    candidates = _server_view_integers(grid)
    assert 0 in candidates  # the experiment seed is among the candidates
    qs = sorted({int(m.content["metrics"]["num-examples"]) for m in grid.received
               if not m.has_error() and "num-examples" in m.content["metrics"]})
    assert not _attack(noises, candidates, ROUNDS, qs, strategy.core.batch_size)


def test_attack_succeeds_when_the_seed_is_known(monkeypatch):
    # control: a client seed the server knows (here 1, 2, 3: partition id + 1) is found by the attack
    noises, grid, strategy = _run(monkeypatch, client_seed_base=1)
    qs = sorted({int(m.content["metrics"]["num-examples"]) for m in grid.received
               if not m.has_error() and "num-examples" in m.content["metrics"]})
    assert _attack(noises, _server_view_integers(grid), ROUNDS, qs, strategy.core.batch_size)


def test_os_entropy_runs_differ_client_seeded_runs_repeat(monkeypatch):
    a, ga, sa = _run(monkeypatch)
    b, gb, sb = _run(monkeypatch)
    # same experiment seed, no client seed: different noise, different activation pattern or public copies
    assert a and b
    assert not any(np.array_equal(x, y) for x in a for y in b)
    assert not np.array_equal(sa.core.XHAT, sb.core.XHAT)
    # with client-side seeds: bit-identical noise, activation, public copies and server metrics
    c, gc, sc = _run(monkeypatch, client_seed_base=1234)
    e, ge, se = _run(monkeypatch, client_seed_base=1234)
    assert len(c) == len(e) and all(np.array_equal(x, y) for x, y in zip(c, e))
    assert np.array_equal(sc.core.XHAT, se.core.XHAT)
    assert np.array_equal(sc.core.active_steps, se.core.active_steps)
    # and a different experiment seed does not change a client-seeded agent's noise
    f, _, _ = _run(monkeypatch, client_seed_base=1234, seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(c, f))


def test_activation_is_decided_by_the_client(monkeypatch):
    _, grid, strategy = _run(monkeypatch, client_seed_base=50)
    replies = [m for m in grid.received if not m.has_error() and "arrays" in m.content]
    active = [m.content["metrics"]["doadp_active"] for m in replies]
    sizes = [sum(a.size for a in m.content["arrays"].to_numpy_ndarrays()) for m in replies]
    # an active reply carries the Top-k message, an inactive one nothing; the server counted exactly these
    assert all((s > 0) == bool(a) for s, a in zip(sizes, active))
    assert int(strategy.core.active_steps.sum()) == int(sum(active))
