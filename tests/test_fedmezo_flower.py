"""FedMeZO's server core with the ready-made clients (T13, T18, T11 at the protocol level, T21),
driven without Flower, and an end-to-end run that must learn and be deterministic."""

import numpy as np
import pytest
from flwr.common import RecordDict

from flwr_strategies.clients.fedmezo import FedMeZOClient
from flwr_strategies.core.messages import Reply
from flwr_strategies.fedmezo import FedMeZOConfig, FedMeZOServer, lora_positions
from flwr_strategies.fedmezo.lr_rules import personalised_lrs
from flwr_strategies.simulations.experiment import Experiment, ExperimentConfig
from flwr_strategies.simulations.runner import run_experiment

H = 4


def _cfg(**kw):
    base = dict(method="fedmezo", dataset="instructions", num_clients=3, rounds=2, lr=2e-4, local_epochs=None,
                local_steps=H, batch_size=1, params={"n_examples": 240, "lr_strategy": "round-wise", "lr_alpha_rel": 0.5,
                                                     "eval_every": 1},
                progress=False)
    base.update(kw)
    return ExperimentConfig(**base)


@pytest.fixture(scope="module")
def exp():
    return Experiment(_cfg())


def _server(exp, **over):
    setup = exp.server_setup()
    config = exp.spec.configs({**exp.params, **over}, setup)["config"]
    keys = list(exp.model_fn().state_dict().keys())
    return FedMeZOServer(setup.initial_parameters, trainable=lora_positions(keys), config=config, num_partitions=3,
                         seed=setup.seed, on_train_config=setup.fit_config)


def _run_rounds(exp, comm_mode, rounds=2):
    core = _server(exp, comm_mode=comm_mode)
    clients = {pid: FedMeZOClient(exp.client_setup(pid, RecordDict(), exp.task.model_fn()), exp.params) for pid in (2, 0, 1)}
    log = []
    for rnd in range(1, rounds + 1):
        ins = core.configure_train(rnd, core.select(rnd, [0, 1, 2]))
        replies = []
        for i in ins:
            arrays, n, metrics = clients[i.partition_id].fit([a.copy() for a in i.arrays], dict(i.config))
            replies.append(Reply(i.partition_id, arrays, n, metrics))
        up = sum(sum(a.nbytes for a in r.arrays) + len(r.metrics.get("zo_pairs", b"")) for r in replies)
        metrics = core.train_round(rnd, replies, sampled=[i.partition_id for i in ins], on_bad_reply="raise")
        log.append(dict(ins=ins, replies=replies, metrics=metrics, up=up))
    return core, log


def test_personal_rates_seed_upload_equals_plain_and_lora_only_payload(exp):
    core_p, log_p = _run_rounds(exp, "params")
    core_s, log_s = _run_rounds(exp, "seeds")
    # instructions carry only the adapters (8 LoRA tensors, r=128), not in the model layout
    ins = log_p[0]["ins"][0]
    assert not ins.model_layout and len(ins.arrays) == 8
    n_lora = sum(a.size for a in ins.arrays)
    assert n_lora == 2 * 2 * 128 * (64 + 64)
    # seed replay gives the same aggregated LoRA, bit for bit (snapshot restore)
    assert all(np.array_equal(a, b) for a, b in zip(core_p.current, core_s.current))
    # and far fewer uploaded bytes: 16 B per step vs 4 B per LoRA value
    assert log_s[0]["up"] == 3 * H * 16
    assert log_p[0]["up"] == 3 * n_lora * 4
    # global_arrays is the whole model in the initial layout, with the new adapters in place
    full = core_p.global_arrays()
    assert len(full) == len(exp.initial_parameters)
    assert all(np.array_equal(full[i], a) for i, a in zip(core_p.trainable, core_p.current))
    frozen = [i for i in range(len(full)) if i not in core_p.trainable]
    assert all(np.array_equal(full[i], exp.initial_parameters[i]) for i in frozen)
    # round 1: everyone at eta0; round 2: round-wise personalised rates from round-1 losses
    assert [i.config["lr"] for i in log_p[0]["ins"]] == [2e-4] * 3
    losses = [r.metrics["train_loss"] for r in log_p[0]["replies"]]
    assert [r.partition_id for r in log_p[0]["replies"]] == [0, 1, 2]
    expected = personalised_lrs(losses, 2e-4, 1e-4)
    r2 = [i.config["lr"] for i in log_p[1]["ins"]]
    assert np.allclose(r2, expected, rtol=0, atol=1e-15) and len(set(r2)) == 3
    # client reply: num_examples = H*B and the metric keys of spec 1.7
    rep = log_p[0]["replies"][0]
    assert rep.num_examples == H * 1
    for k in ("train_loss", "train_loss_mid", "n_skipped", "lr_used", "partition-id", "proj_grad_abs_mean"):
        assert k in rep.metrics
    # aggregation = uniform mean of the returned tensors (A and B separately)
    cl = [r.arrays for r in log_p[1]["replies"]]
    for k in range(8):
        ref = np.mean([c[k].astype(np.float64) for c in cl], axis=0)
        assert np.allclose(ref, core_p.current[k], rtol=1e-6, atol=1e-9)


def test_identical_client_arrays_aggregate_to_themselves(exp):
    core = _server(exp)
    ins = core.configure_train(1, [0, 1, 2])
    arrs = [np.random.default_rng(k).normal(size=a.shape).astype(np.float32) for k, a in enumerate(ins[0].arrays)]
    core.train_round(1, [Reply(p, arrs, H, {"train_loss": 1.0}) for p in range(3)], sampled=[0, 1, 2],
                     on_bad_reply="raise")
    assert all(np.array_equal(a, b) for a, b in zip(arrs, core.current))


def test_weighting_by_examples(exp):
    core = _server(exp, weighting="num_examples")
    ins = core.configure_train(1, [0, 1])
    a0 = [np.zeros_like(a) for a in ins[0].arrays]
    a1 = [np.ones_like(a) for a in ins[0].arrays]
    core.train_round(1, [Reply(0, a0, 1, {}), Reply(1, a1, 3, {})], sampled=[0, 1], on_bad_reply="raise")
    assert all(np.allclose(c, 0.75) for c in core.current)


def test_bad_strategy_options(exp):
    with pytest.raises(ValueError, match="comm_mode"):
        _server(exp, comm_mode="zip")
    with pytest.raises(ValueError, match="lr_strategy"):
        _server(exp, lr_strategy="fancy")


def test_end_to_end_learns_and_is_deterministic():
    # the paper's H = 30 steps per round: at 10 steps of lr 2e-4 the tiny base moves by less than the MeZO
    # estimate's noise (losses 3.5927, 3.5990, 3.5921, 3.5952 over 3 rounds), at 30 it learns every round
    cfg = _cfg(rounds=2, local_steps=30, params={"n_examples": 240, "eval_every": 1})
    r1 = run_experiment(cfg)
    losses = [r["loss"] for r in r1["rounds"]]
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[1] < losses[0]
    r2 = run_experiment(cfg)
    assert [r["loss"] for r in r2["rounds"]] == losses


def test_config_defaults_are_the_papers():
    c = FedMeZOConfig()
    assert (c.lr, c.local_steps, c.batch_size, c.mu, c.weight_decay, c.num_perturbations) == (1e-5, 30, 1, 1e-3, 0.0, 1)
    assert (c.lr_strategy, c.lr_alpha, c.lr_window, c.weighting, c.comm_mode, c.eval_every) == \
        ("frozen", 5e-6, 5, "uniform", "params", 10)


def test_lr_decay_scales_the_personalised_rates():
    arrays = [np.zeros((2, 2), np.float32), np.ones((3,), np.float32)]
    cfg = FedMeZOConfig(lr=1e-3, lr_decay=0.5, lr_strategy="random", lr_alpha_rel=0.5)
    core = FedMeZOServer(arrays, trainable=[0], config=cfg, num_partitions=2, seed=3)
    twin = FedMeZOServer(arrays, trainable=[0], config=FedMeZOConfig(lr=1e-3, lr_strategy="random", lr_alpha_rel=0.5),
                         num_partitions=2, seed=3)
    for rnd in (1, 3):
        got = [i.config["lr"] for i in core.configure_train(rnd, [0, 1])]
        ref = [i.config["lr"] * 0.5 ** (rnd - 1) for i in twin.configure_train(rnd, [0, 1])]
        assert got == ref and all(5e-4 * 0.5 ** (rnd - 1) <= g <= 1.5e-3 * 0.5 ** (rnd - 1) for g in got)
