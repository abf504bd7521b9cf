"""MethodSpec registrations: ``fedmezo`` and the backprop baseline ``lora-fedavg`` (task ``causal-lm``)."""

from __future__ import annotations

from ..registry import MethodSpec, register_method
from ..setup import ClientSetup, ServerSetup
from .strategy import FedMeZO, lora_indices

PAPER = "Ling, Chen, Yao, Li, Shen, On the Convergence of Zeroth-Order Federated Tuning for LLMs, KDD 2024"

LM_DEFAULTS = {"model_dir": "", "lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "lora_targets": "q_proj,v_proj",
               "max_len": 320, "base_dtype": "fp32", "n_examples": 1200, "test_fraction": 1 / 12, "eval_every": 1}

FEDMEZO_DEFAULTS = {**LM_DEFAULTS, "mu": 1e-3, "num_perturbations": 1, "lr_strategy": "frozen", "lr_alpha": 5e-6,
                    "lr_alpha_rel": 0.0, "lr_window": 5, "weighting": "uniform", "comm_mode": "params",
                    "z_device": "cpu", "restore_mode": "snapshot"}


def _strategy(setup: ServerSetup, params: dict, *, zo: bool) -> FedMeZO:
    model = setup.model_fn()
    keys = list(model.state_dict().keys())
    lr = float(setup.train.lr)
    alpha = float(params.get("lr_alpha_rel", 0.0)) * lr or float(params.get("lr_alpha", 5e-6))
    return FedMeZO(
        full_template=setup.initial_parameters, lora_idx=lora_indices(keys), num_clients=setup.num_clients,
        lr=lr, mu=float(params.get("mu", 1e-3)), local_steps=int(setup.train.local_steps or 30),
        batch_size=int(setup.train.batch_size), weight_decay=float(setup.train.weight_decay),
        num_perturbations=int(params.get("num_perturbations", 1)),
        lr_strategy=str(params.get("lr_strategy", "frozen")) if zo else "frozen", lr_alpha=alpha,
        lr_window=int(params.get("lr_window", 5)), weighting=str(params.get("weighting", "uniform")),
        comm_mode=str(params.get("comm_mode", "params")) if zo else "params",
        z_device=str(params.get("z_device", "cpu")), restore_mode=str(params.get("restore_mode", "snapshot")),
        eval_every=int(params.get("eval_every", 1)), num_rounds=setup.num_rounds, run_seed=setup.seed,
        fraction_fit=setup.fraction_fit, evaluate_full_fn=setup.evaluate_fn)


def _client_zo(setup: ClientSetup, params: dict):
    from flwr_strategies.clients.fedmezo import FedMeZOClient

    return FedMeZOClient(setup, params)


def _client_bp(setup: ClientSetup, params: dict):
    from flwr_strategies.clients.fedmezo import LoRAFedAvgClient

    return LoRAFedAvgClient(setup, params)


register_method(MethodSpec(
    name="fedmezo",
    summary="FedMeZO: FedAvg of LoRA adapters tuned by MeZO zeroth-order steps (personalised lr, seed upload)",
    paper=PAPER, defaults=FEDMEZO_DEFAULTS,
    build_strategy=lambda s, p: _strategy(s, p, zo=True), build_client=_client_zo, task="causal-lm"))
register_method(MethodSpec(
    name="lora-fedavg",
    summary="Backprop LoRA FedAvg: H SGD steps on LoRA adapters, uniform average (FedMeZO's baseline)",
    paper=PAPER, defaults=dict(LM_DEFAULTS),
    build_strategy=lambda s, p: _strategy(s, p, zo=False), build_client=_client_bp, task="causal-lm"))
