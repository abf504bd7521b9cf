"""Registrations: ``fedmezo`` and its backprop baseline ``lora-fedavg`` (task ``causal-lm``).

Training defaults are the paper's (Ling et al., KDD 2024, Sec. 5 / App. E and the official configs),
declared with their sources by the classes' configs (:class:`~.config.FedMeZOConfig`,
:class:`~.config.LoRAFedAvgConfig`), except the learning rate and the data (``train_defaults``)
(``python -m simulations defaults fedmezo``):

- ``lr`` = 1e-4, provenance "project": the named override of the classes' 1e-5. The paper's 1e-5
  (about 1/sqrt(d) for the 3.4B parameters of OpenLLaMA-3B) moves the project's tiny default model (hidden 64, 2 layers, 115,520 base
  parameters, LoRA r=128: 65,536 adapter values) by 0.4% of its test loss in 5 rounds. On that
  model 1e-4 is the largest rate whose test loss falls at rounds 10, 20 and 30 with three seeds; 2e-4
  falls faster for 15 rounds, then hovers and rises after round 20 with two of them, and 5e-4
  surges after round 2 (the paper's F.4 behaviour; ``compare --preset fedmezo``, measured in
  docs/results/fedmezo.md). The paper's value is kept for the
  paper's model in the ``fedmezo-paper`` and ``fedmezo-code`` presets and in
  :class:`~.config.FedMeZOConfig`.
- ``dataset`` = ``instructions`` (generated): the paper's datasets need ``--data-dir``; a dataset
  this task cannot read (``digits``) is an error.
- Everything else is the paper's: 3 clients, all of them every round, H=30 local steps of batch
  1, mu=1e-3, no weight decay, momentum, clipping or decay, LoRA r=128 / alpha=256 / dropout 0.05
  on q_proj, v_proj, evaluation every 10 rounds (and at the last round). The baseline uses the
  same learning rate as FedMeZO, as the paper does.

``variant`` (``paper`` | ``code``): ``code`` is the official code's arithmetic and precision. The
whole model runs in half precision (``is_enable_half: True`` in the official configs:
``model.half()``), the directions are drawn in the parameters' dtype and device, the tensors are
restored by ``+mu z``, and the update is ``theta - lr (g z + wd theta)`` with weight decay skipped
for tensor names containing ``bias``, ``layer_norm`` or ``layernorm``, matched case-sensitively as
the official ``mezo_trainer.py`` does. Under ``variant=code`` the dtype, direction and restore
defaults follow (named overrides, :data:`FEDMEZO_VARIANT_DEFAULTS`).
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, core_kwargs, register_method
from ..setup import ServerSetup

_WORKLOAD = "flwr_strategies.fedmezo.config:LoRAWorkloadConfig"
PAPER = "Ling, Chen, Yao, Li, Shen, On the Convergence of Zeroth-Order Federated Tuning for LLMs, KDD 2024"

_YAML = "llm/baseline/frozen/dolly/dolly_mezo_meta.yaml"
_LR = ("project: the paper's 1e-5 (App. E.3) moves the tiny default model by 0.4% of its test loss in 5 rounds; "
       "1e-4 is the largest rate whose test loss falls at rounds 10, 20 and 30 with three seeds (2e-4 hovers after "
       "round 15; docs/results/fedmezo.md, compare --preset fedmezo); the fedmezo-paper preset keeps 1e-5")
_DATASET = ("project: generated instructions in 8 categories, the only LM data here without a download; the "
            "paper's Dolly, Alpaca, GSM8K and CodeAlpaca (App. E.1) run with --dataset NAME --data-dir DIR")

#: Training settings (ExperimentConfig fields) as (value, provenance) that the strategy classes do not
#: declare; the others (local steps, batch, weight decay, decay...) are the configs' own fields
#: (:data:`DERIVED`), with their declared defaults and sources. ``lr`` is the one named override of a
#: declared field: 1e-4 where the class (the paper) has 1e-5, printed with its reason by ``defaults``.
TRAIN_DEFAULTS = {
    "dataset": ("instructions", _DATASET),
    "lr": (1e-4, _LR),
    "momentum": (0.0, "official code: llm/trainer/mezo_trainer.py keeps no optimizer state"),
    "grad_clip": (None, "official code: llm/trainer/mezo_trainer.py computes no gradient to clip"),
    "num_clients": (3, "paper: App. E.1 (a three-way split: 3 clients)"),
    "fraction_fit": (1.0, f"official code: {_YAML} (client_num 3, every client every round)"),
}
LORA_FEDAVG_TRAIN_DEFAULTS = {k: v for k, v in TRAIN_DEFAULTS.items() if k not in ("momentum", "grad_clip")}

#: The run's own settings that set the configs' training fields (the command line's flags).
DERIVED = {k: f"--{k.replace('_', '-')}" for k in ("lr", "local_steps", "local_epochs", "batch_size", "weight_decay",
                                                  "lr_decay", "momentum", "grad_clip")}
_HALF = "official code: is_enable_half: True in llm/baseline/*/*.yaml runs model.half() on the whole model"
#: Defaults that follow ``variant``: the official code's precision, directions and restore.
VARIANT_DEFAULTS = {
    "base_dtype": ("params.variant", {
        "code": ("fp16", _HALF),
        "*": ("fp32", "project: fp32 on CPU; the paper loads the model in 16 bits (App. E.2): variant=code"),
    }),
    "adapter_dtype": ("params.variant", {
        "code": ("fp16", _HALF),
        "*": ("fp32", "project: fp32 adapters keep updates of 1e-5 that fp16 rounds away; fp16 with the whole "
                      "model is variant=code"),
    }),
}
FEDMEZO_VARIANT_DEFAULTS = {
    **VARIANT_DEFAULTS,
    "z_device": ("params.variant", {
        "code": ("param", "official code: llm/trainer/mezo_trainer.py draws z with torch.normal in the parameter's "
                          "dtype and device"),
        "*": ("cpu", "project: directions drawn on the CPU are identical on every machine (seed replay)"),
    }),
    "restore_mode": ("params.variant", {
        "code": ("regenerate", "official code: llm/trainer/mezo_trainer.py restores by perturbing +mu z again"),
        "*": ("snapshot", "project: a bit-exact restore from a copy of the tuned tensors"),
    }),
}

def training(params: dict, setup: ServerSetup) -> dict[str, Any]:
    """``derive`` of LoRA FedAvg: the config's training fields (:data:`DERIVED`) from the run's
    settings (``--lr``, ``--local-steps``...)."""
    t = setup.train
    steps = ({"local_steps": int(t.local_steps), "local_epochs": None} if t.local_steps
             else {"local_steps": None, "local_epochs": int(t.local_epochs)})
    return {"lr": t.lr, **steps, "batch_size": int(t.batch_size), "weight_decay": t.weight_decay,
            "lr_decay": t.lr_decay, "momentum": t.momentum, "grad_clip": t.grad_clip}


def mezo_training(params: dict, setup: ServerSetup) -> dict[str, Any]:
    """``derive`` of FedMeZO: :func:`training`, refusing ``momentum`` and ``grad_clip`` (MeZO keeps
    no optimizer state and computes no gradient)."""
    t = setup.train
    if t.momentum:
        raise ValueError(f"fedmezo: momentum={t.momentum!r} is not supported (MeZO keeps no optimizer state); use 0")
    if t.grad_clip is not None:
        raise ValueError(f"fedmezo: grad_clip={t.grad_clip!r} is not supported (MeZO computes no gradient to clip)")
    return training(params, setup)


def _lora(setup: ServerSetup, params: dict) -> dict[str, Any]:
    """The core's tuned positions (the LoRA arrays of the task's model) and final round."""
    from .server import lora_positions

    return {"trainable": lora_positions(list(setup.model_fn().state_dict())), "final_round": setup.num_rounds,
            **core_kwargs(setup)}


for _name, _summary, _strategy, _overrides, _derive, _client, _train in (
        ("fedmezo", "FedMeZO: FedAvg of LoRA adapters tuned by MeZO zeroth-order steps (personalised lr, seed upload)",
         "FedMeZO", FEDMEZO_VARIANT_DEFAULTS, mezo_training, "FedMeZOClient", TRAIN_DEFAULTS),
        ("lora-fedavg", "LoRA FedAvg: backprop SGD on LoRA adapters, uniform average (FedMeZO's baseline)",
         "LoRAFedAvg", VARIANT_DEFAULTS, training, "LoRAFedAvgClient", LORA_FEDAVG_TRAIN_DEFAULTS)):
    register_method(MethodSpec(
        name=_name, summary=_summary, paper=PAPER, strategy="flwr_strategies.fedmezo.strategy:" + _strategy,
        settings=(_WORKLOAD,), overrides=_overrides, derived=DERIVED, derive=_derive, core_arguments=_lora,
        client="flwr_strategies.clients.fedmezo:" + _client, train_defaults=_train, task="causal-lm"))
