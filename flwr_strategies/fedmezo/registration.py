"""Registrations: ``fedmezo`` and its backprop baseline ``lora-fedavg`` (task ``causal-lm``).

Training defaults (``train_defaults``) are the paper's (Ling et al., KDD 2024, Sec. 5 / App. E and
the reference configs) except the learning rate:

- ``lr`` = 2e-4, provenance "project". The paper's 1e-5 (about 1/sqrt(d) for the 3.4B parameters
  of OpenLLaMA-3B) moves the project's tiny default model (hidden 64, 2 layers, 115,520 base
  parameters, LoRA r=128: 65,536 adapter values) by 0.6% of its test loss in 5 rounds. On that
  model 2e-4 is the largest rate that stayed stable for 30 rounds in our sweep (3e-4 surges after
  round 18, 5e-4 after round 3: the paper's F.4 behaviour). The paper's value is kept for the
  paper's model in the ``fedmezo-paper`` preset and in :class:`~.config.FedMeZOConfig`.
- Everything else is the paper's: 3 clients, all of them every round, H=30 local steps of batch
  1, mu=1e-3, no weight decay, momentum, clipping or decay, LoRA r=128 / alpha=256 / dropout 0.05
  on q_proj, v_proj, evaluation every 10 rounds (and at the last round). The baseline uses the
  same learning rate as FedMeZO, as the paper does.
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, register_method
from ..setup import ServerSetup
from .config import FedMeZOConfig, LoRAFedAvgConfig
from .server import FedMeZOServer, LoRAFedAvgServer, lora_positions

PAPER = "Ling, Chen, Yao, Li, Shen, On the Convergence of Zeroth-Order Federated Tuning for LLMs, KDD 2024"

#: The LM workload's settings (see ``simulations.lm.task.LMSettings``): paper LoRA shape, tiny-model data sizes.
LM_DEFAULTS = {"model_dir": "", "lora_r": 128, "lora_alpha": 256, "lora_dropout": 0.05,
               "lora_targets": "q_proj,v_proj", "max_len": 320, "base_dtype": "fp32", "adapter_dtype": "fp32",
               "n_examples": 1200, "test_fraction": 1 / 12, "eval_every": 10, "weighting": "uniform"}

_ZO = FedMeZOConfig()
FEDMEZO_DEFAULTS = {**LM_DEFAULTS, "mu": _ZO.mu, "num_perturbations": _ZO.num_perturbations,
                    "lr_strategy": _ZO.lr_strategy, "lr_alpha": _ZO.lr_alpha, "lr_alpha_rel": None,
                    "lr_window": _ZO.lr_window, "comm_mode": _ZO.comm_mode, "z_device": _ZO.z_device,
                    "restore_mode": _ZO.restore_mode}

#: Training settings (ExperimentConfig fields) as (value, provenance).
TRAIN_DEFAULTS = {
    "lr": (2e-4, "project"),
    "local_steps": (30, "paper"),
    "local_epochs": (None, "paper"),
    "batch_size": (1, "paper"),
    "weight_decay": (0.0, "official code"),
    "momentum": (0.0, "official code"),
    "lr_decay": (1.0, "paper"),
    "grad_clip": (None, "official code"),
    "num_clients": (3, "paper"),
    "fraction_fit": (1.0, "official code"),
}

#: Where each ``--set`` hyperparameter's default comes from (``extra["param_provenance"]``).
PARAM_PROVENANCE = {
    "model_dir": "project", "lora_r": "paper", "lora_alpha": "paper", "lora_dropout": "official code",
    "lora_targets": "official code", "max_len": "project", "base_dtype": "project", "adapter_dtype": "spec",
    "n_examples": "project", "test_fraction": "project", "eval_every": "official code", "weighting": "paper",
    "mu": "paper", "num_perturbations": "paper", "lr_strategy": "official code", "lr_alpha": "official code",
    "lr_alpha_rel": "spec", "lr_window": "official code", "comm_mode": "paper", "z_device": "spec",
    "restore_mode": "spec",
}

#: Why a value in TRAIN_DEFAULTS is not the paper's (shown in docs and results).
TRAIN_DEFAULT_NOTES = {
    "lr": "paper: 1e-5 for OpenLLaMA-3B (fedmezo-paper preset); 2e-4 is the largest stable rate on the tiny "
          "default model, where 1e-5 lowers the test loss by only 0.6% in 5 rounds",
}


def _steps(setup: ServerSetup) -> dict[str, Any]:
    t = setup.train
    if t.local_steps:
        return {"local_steps": int(t.local_steps), "local_epochs": None}
    return {"local_steps": None, "local_epochs": int(t.local_epochs)}


def _core_kwargs(setup: ServerSetup) -> dict[str, Any]:
    keys = list(setup.model_fn().state_dict().keys())
    return {"trainable": lora_positions(keys), "final_round": setup.num_rounds, "num_partitions": setup.num_clients,
            "fraction_train": setup.fraction_fit, "min_train": setup.clients_per_round, "seed": setup.seed,
            "on_train_config": setup.fit_config}


def fedmezo_config(setup: ServerSetup, params: dict) -> FedMeZOConfig:
    """:class:`FedMeZOConfig` from the experiment's training settings and ``--set`` parameters.

    ``momentum`` and ``grad_clip`` are rejected: MeZO keeps no optimizer state and computes no gradient.
    """
    t = setup.train
    if t.momentum:
        raise ValueError(f"fedmezo: momentum={t.momentum!r} is not supported (MeZO keeps no optimizer state); use 0")
    if t.grad_clip is not None:
        raise ValueError(f"fedmezo: grad_clip={t.grad_clip!r} is not supported (MeZO computes no gradient to clip)")
    return FedMeZOConfig(
        lr=t.lr, **_steps(setup), batch_size=int(t.batch_size), mu=params["mu"], weight_decay=t.weight_decay,
        lr_decay=t.lr_decay, num_perturbations=params["num_perturbations"], lr_strategy=params["lr_strategy"],
        lr_alpha=params["lr_alpha"], lr_alpha_rel=params["lr_alpha_rel"], lr_window=params["lr_window"],
        weighting=params["weighting"], comm_mode=params["comm_mode"], z_device=params["z_device"],
        restore_mode=params["restore_mode"], eval_every=params["eval_every"])


def lora_fedavg_config(setup: ServerSetup, params: dict) -> LoRAFedAvgConfig:
    """:class:`LoRAFedAvgConfig` from the experiment's training settings and ``--set`` parameters."""
    t = setup.train
    return LoRAFedAvgConfig(lr=t.lr, **_steps(setup), batch_size=int(t.batch_size), weight_decay=t.weight_decay,
                            momentum=t.momentum, lr_decay=t.lr_decay, grad_clip=t.grad_clip,
                            weighting=params["weighting"], eval_every=params["eval_every"])


def _fedmezo(setup: ServerSetup, params: dict) -> FedMeZOServer:
    config = fedmezo_config(setup, params)
    return FedMeZOServer(setup.initial_parameters, config=config, **_core_kwargs(setup))


def _lora_fedavg(setup: ServerSetup, params: dict) -> LoRAFedAvgServer:
    config = lora_fedavg_config(setup, params)
    return LoRAFedAvgServer(setup.initial_parameters, config=config, **_core_kwargs(setup))


register_method(MethodSpec(
    name="fedmezo",
    summary="FedMeZO: FedAvg of LoRA adapters tuned by MeZO zeroth-order steps (personalised lr, seed upload)",
    paper=PAPER, defaults=FEDMEZO_DEFAULTS, build_core=_fedmezo,
    client="flwr_strategies.clients.fedmezo:build_fedmezo_client", train_defaults=TRAIN_DEFAULTS,
    task="causal-lm", extra={"train_default_notes": TRAIN_DEFAULT_NOTES, "param_provenance": PARAM_PROVENANCE}))
register_method(MethodSpec(
    name="lora-fedavg",
    summary="LoRA FedAvg: backprop SGD on LoRA adapters, uniform average (FedMeZO's baseline)",
    paper=PAPER, defaults=dict(LM_DEFAULTS), build_core=_lora_fedavg,
    client="flwr_strategies.clients.fedmezo:build_lora_fedavg_client", train_defaults=TRAIN_DEFAULTS,
    task="causal-lm", extra={"train_default_notes": TRAIN_DEFAULT_NOTES,
                             "param_provenance": {k: PARAM_PROVENANCE[k] for k in LM_DEFAULTS}}))
