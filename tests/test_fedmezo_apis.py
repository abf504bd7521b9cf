"""FedMeZO and LoRA FedAvg give the same per-round numbers through both Flower APIs, and a run
checkpointed after round k and resumed ends where a straight run ends."""

import numpy as np
import pytest
from flwr.app import ArrayRecord

from apiharness import assert_same_records, legacy_run, message_run
from flwr_strategies.core.state import load_state, save_state
from flwr_strategies.fedmezo import serverapp, strategy
from flwr_strategies.simulations.experiment import ExperimentConfig


def _cfg(method, **params):
    return ExperimentConfig(method=method, num_clients=3, rounds=3, lr=2e-4, local_epochs=None, local_steps=3,
                            batch_size=1, params={"n_examples": 60, "eval_every": 1, **params}, progress=False)


@pytest.mark.parametrize("method,params", [
    ("fedmezo", {}),
    ("fedmezo", {"lr_strategy": "model-diff", "lr_alpha_rel": 0.5, "comm_mode": "seeds"}),
    ("lora-fedavg", {}),
])
def test_same_numbers_through_both_apis(method, params):
    cfg = _cfg(method, **params)
    a, sa, _ = legacy_run(cfg)
    b, sb, _ = message_run(cfg)
    assert len(a) == 4 and a[-1][1] != a[0][1]
    assert_same_records(a, b)
    assert all(np.array_equal(x, y) for x, y in zip(sa.core.current, sb.core.current))


@pytest.mark.parametrize("run", [legacy_run, message_run])
def test_checkpoint_and_resume_equals_straight_run(tmp_path, run):
    cfg = _cfg("fedmezo", lr_strategy="round-wise", lr_alpha_rel=0.5)
    straight, s_full, _ = run(cfg)
    first, s1, clients = run(cfg, rounds=2)
    state = load_state(save_state(tmp_path / "ck.npz", s1.state_dict()))
    assert state["method"]["lr_rule"]["loss_history"]  # the personalised-rate history is checkpointed
    rest, s2, _ = run(cfg, state=state, clients=clients)
    assert rest[-1] == straight[-1]
    assert all(np.array_equal(x, y) for x, y in zip(s2.core.current, s_full.core.current))


def test_user_facing_classes_build_their_cores():
    import torch

    from flwr_strategies.simulations.lm.model import apply_lora, build_tiny_llama

    model = apply_lora(build_tiny_llama(0), r=4, alpha=8)
    sd = model.state_dict()
    legacy = strategy.FedMeZO(initial_parameters=sd, lr=2e-4, mu=1e-3, lr_strategy="five-round", fraction_fit=1.0,
                              num_rounds=5)
    legacy_core = legacy.build_core(list(ArrayRecord(sd).to_numpy_ndarrays()), 3)
    n_lora = sum(1 for k in sd if "lora_" in k)
    assert len(legacy_core.trainable) == n_lora == 8
    assert legacy_core.config.lr_strategy == "five-round" and legacy_core.final_round == 5
    # the whole model comes back in the initial layout for evaluate_fn
    full = legacy_core.global_arrays()
    assert [a.shape for a in full] == [tuple(t.shape) for t in sd.values()]
    lora = strategy.LoRAFedAvg(initial_parameters=sd, momentum=0.9)
    assert lora.build_core(ArrayRecord(sd).to_numpy_ndarrays(), 3).config.momentum == 0.9
    # Message API: no initial arrays or client count in the constructor; trainable found by name in round 1
    msg = serverapp.FedMeZO(fraction_train=1.0, min_available_nodes=3, lr=1e-5)
    msg._names = list(ArrayRecord(sd).keys())
    core = msg.build_core(ArrayRecord(sd).to_numpy_ndarrays(), 3)
    assert core.trainable == legacy_core.trainable and core.config.lr == 1e-5
    assert torch.is_tensor(next(iter(sd.values())))
