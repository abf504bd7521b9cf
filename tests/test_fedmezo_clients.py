"""FedMeZO's client pieces, alone: the MeZO optimizer (update-rule oracle, schedulers, no autograd),
payload helpers, fp16 adapters, and the ready-made clients on in-memory data, a DataLoader and
TensorData, equal to the few lines a user puts in their own loop."""

import numpy as np
import pytest
import torch
from flwr.common import RecordDict
from torch import nn

from flwr_strategies.clients.fedmezo import (MeZO, FedMeZOClient, LoRAFedAvgClient, cast_adapters,
                                             load_trainable_arrays, round_batches, round_steps, trainable_arrays)
from flwr_strategies.clients.training import TensorData
from flwr_strategies.fedmezo import z_like
from flwr_strategies.fedmezo.zseed import derive_seed
from flwr_strategies.setup import ClientSetup, TrainConfig


def _net():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    x, y = torch.randn(16, 5), torch.randn(16, 1)
    return m, (lambda: ((m(x) - y) ** 2).mean())


def test_mezo_step_is_the_update_rule_and_follows_the_lr_scheduler():
    m, loss = _net()
    opt = MeZO(m, lr=0.05, mu=1e-3, seed=(7, 2, 1))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for k, lr in enumerate([0.05, 0.025]):
        before = [p.detach().clone() for p in m.parameters()]
        out = opt.step(loss)
        g = opt.last.g
        assert float(out) == opt.last.loss_plus
        zs = z_like(before, derive_seed(7, 2, 1, k))
        for p, b, z in zip(m.parameters(), before, zs):
            assert torch.equal(p, b.add(z, alpha=-lr * g))
        sched.step()
    assert opt.pairs == [(derive_seed(7, 2, 1, k), opt.pairs[k][1]) for k in range(2)]
    assert all(p.grad is None for p in m.parameters())


def test_mezo_needs_a_closure_and_a_valid_lr():
    m, _ = _net()
    with pytest.raises(ValueError, match="closure"):
        MeZO(m, lr=0.1).step(None)
    with pytest.raises(ValueError, match="lr must be a finite number > 0, got nan"):
        MeZO(m, lr=float("nan"))
    with pytest.raises(ValueError, match="seed must be"):
        MeZO(m, lr=0.1, seed=(1, 2))


def test_mezo_on_a_peft_model_touches_only_the_adapters_and_runs_in_eval_mode():
    from flwr_strategies.simulations.lm.data import generate_instructions, tokenize_records
    from flwr_strategies.simulations.lm.model import apply_lora, load_causal_lm, ensure_tiny_base

    model, tok = load_causal_lm(ensure_tiny_base())
    model = apply_lora(model, r=8, alpha=16)
    model.train()
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora = [a.copy() for a in trainable_arrays(model)]
    batch = tokenize_records(generate_instructions(2, seed=3), tok).batch([0, 1])
    modes = []
    opt = MeZO(model, lr=1e-3)
    opt.step(lambda: (modes.append(model.training), model(**batch).loss)[1])
    assert modes == [False, False] and model.training  # dropout off in both forwards, restored after
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if not p.requires_grad)
    assert any(not np.array_equal(a, b) for a, b in zip(lora, trainable_arrays(model)))
    load_trainable_arrays(model, lora)
    assert all(np.array_equal(a, b) for a, b in zip(lora, trainable_arrays(model)))
    # federated evaluation may send the adapters or the whole state_dict: both load
    from flwr_strategies.clients.training import get_weights

    data = tokenize_records(generate_instructions(6, seed=4), tok)
    setup = ClientSetup(partition_id=0, num_partitions=1, model=model, train_data=data, test_data=data,
                        train=TrainConfig(lr=1e-3, local_epochs=None, local_steps=1, batch_size=1), device="cpu", seed=0)
    client = FedMeZOClient(setup)
    full = get_weights(model)
    l1, n1, m1 = client.evaluate(lora, {})
    l2, n2, m2 = client.evaluate(full, {})
    assert (l1, n1) == (l2, n2) and n1 == 6 and np.isfinite(l1) and 0 <= m1["accuracy"] <= 1
    with pytest.raises(ValueError, match="expected 8 trainable arrays"):
        load_trainable_arrays(model, lora[:7])


def test_fp16_adapters_quantise_small_updates_like_the_reference():
    torch.manual_seed(0)
    m32 = nn.Linear(4, 4)
    m16 = cast_adapters(nn.Linear(4, 4), "fp16")
    m16.load_state_dict({k: v.half() for k, v in m32.state_dict().items()})
    assert all(p.dtype == torch.float16 for p in m16.parameters())
    x = torch.randn(3, 4)
    w16 = [p.detach().clone() for p in m16.parameters()]
    w32 = [p.detach().clone() for p in m32.parameters()]
    # the loss is computed in fp32 on an fp32 copy of the input; the step is the same seed for both
    o32 = MeZO(m32, lr=1e-7, mu=1e-2, seed=1)
    o16 = MeZO(m16, lr=1e-7, mu=1e-2, seed=1)
    o32.step(lambda: (m32(x) ** 2).mean())
    o16.step(lambda: (m16(x.half()).float() ** 2).mean())
    # an update of ~1e-7 is below half an fp16 ulp (~1e-4 at these values): fp16 adapters do not move
    assert all(torch.equal(a, b) for a, b in zip(w16, m16.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(w32, m32.parameters()))
    with pytest.raises(ValueError, match="adapter_dtype must be one of"):
        cast_adapters(m32, "fp8")


class _Wrap(nn.Module):
    """A causal-LM-like wrapper around a tiny regression net: ``model(input_ids=x, labels=y).loss``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Linear(3, 1)

    def forward(self, input_ids=None, labels=None, **_):
        class Out:
            pass

        out = Out()
        out.loss = ((self.net(input_ids) - labels) ** 2).mean()
        return out


def _setup(train_data, partition_id=1):
    return ClientSetup(partition_id=partition_id, num_partitions=3, model=_Wrap(), train_data=train_data, test_data=None,
                       train=TrainConfig(lr=0.01, local_epochs=None, local_steps=3, batch_size=2), device="cpu", seed=0)


CONFIG = {"server_round": 2, "lr": 0.05, "mu": 1e-3, "local_steps": 3, "local_epochs": 0, "batch_size": 2, "run_seed": 4,
          "num_perturbations": 1, "restore_mode": "snapshot", "z_device": "cpu", "comm_mode": "params"}


def test_ready_made_client_equals_the_users_few_lines_on_a_dataloader():
    torch.manual_seed(2)
    x, y = torch.randn(10, 3), torch.randn(10, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=2, shuffle=False)
    start = trainable_arrays(_Wrap())
    client = FedMeZOClient(_setup(loader))
    arrays, n, metrics = client.fit(start, dict(CONFIG))
    assert n == 6 and metrics["n_skipped"] == 0 and np.isfinite(metrics["train_loss"])
    # the user's own loop: four lines
    model = _Wrap()
    load_trainable_arrays(model, start)
    opt = MeZO.from_config(model, CONFIG, partition_id=1)
    for _, (xb, yb) in zip(range(CONFIG["local_steps"]), loader):
        opt.step(lambda: model(input_ids=xb, labels=yb).loss)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, trainable_arrays(model)))


def test_in_memory_data_uses_the_stateless_cursor_and_epochs():
    torch.manual_seed(3)
    data = TensorData(torch.randn(5, 3), torch.randn(5, 1))
    b = list(round_batches(data, 3, 2, run_seed=4, server_round=2, partition_id=1))
    assert [len(t[0]) for t in b] == [2, 2, 2]
    again = list(round_batches(data, 3, 2, run_seed=4, server_round=2, partition_id=1))
    assert all(torch.equal(p[0], q[0]) for p, q in zip(b, again))
    assert round_steps({"local_steps": 0, "local_epochs": 2}, data, 2) == 6
    arrays, n, _ = FedMeZOClient(_setup(data)).fit(trainable_arrays(_Wrap()), {**CONFIG, "local_steps": 0,
                                                                             "local_epochs": 1})
    assert n == 6  # ceil(5 / 2) = 3 steps of 2


def test_seed_mode_and_rejected_settings():
    torch.manual_seed(4)
    data = TensorData(torch.randn(6, 3), torch.randn(6, 1))
    arrays, n, metrics = FedMeZOClient(_setup(data)).fit(trainable_arrays(_Wrap()), {**CONFIG, "comm_mode": "seeds"})
    assert arrays == [] and len(metrics["zo_pairs"]) == 3 * 16
    for key, value in (("momentum", 0.9), ("grad_clip", 1.0)):
        with pytest.raises(ValueError, match=f"FedMeZO: {key}={value} is not supported"):
            FedMeZOClient(_setup(data)).fit(trainable_arrays(_Wrap()), {**CONFIG, key: value})


def test_lora_fedavg_client_honours_momentum_weight_decay_and_clipping():
    torch.manual_seed(5)
    data = TensorData(torch.randn(8, 3), torch.randn(8, 1) * 10)
    start = trainable_arrays(_Wrap())
    cfg = {**CONFIG, "lr": 0.1, "local_steps": 1}
    plain, _, m = LoRAFedAvgClient(_setup(data)).fit(start, cfg)
    assert np.isfinite(m["train_loss"])
    # one clipped step moves the parameters by exactly lr * clip
    clipped, _, _ = LoRAFedAvgClient(_setup(data)).fit(start, {**cfg, "grad_clip": 0.01})
    step = np.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(clipped, start)))
    assert abs(step - 0.1 * 0.01) < 1e-6
    assert np.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(plain, start))) > 0.1 * 0.01
    # weight decay: one step adds lr * wd * theta to the descent direction
    wd, _, _ = LoRAFedAvgClient(_setup(data)).fit(start, {**cfg, "weight_decay": 0.5})
    assert all(np.allclose(w, p - 0.1 * 0.5 * s, atol=1e-6) for w, p, s in zip(wd, plain, start))
    # momentum changes the second step
    two = {**cfg, "local_steps": 2}
    a, _, _ = LoRAFedAvgClient(_setup(data)).fit(start, two)
    b, _, _ = LoRAFedAvgClient(_setup(data)).fit(start, {**two, "momentum": 0.9})
    assert any(not np.allclose(x, y) for x, y in zip(a, b))
