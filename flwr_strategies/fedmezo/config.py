"""Hyperparameters of FedMeZO and of its backprop baseline LoRA FedAvg (frozen, validated).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926). Reference code: alibaba/FederatedScope, branch
``FedMeZO`` (``llm/baseline/{frozen,dynamic}/*.yaml``). Every default is the paper's setting for
OpenLLaMA-3B, the official code's or this library's choice (each field's source says which); the
project's runner may replace the learning rate for its tiny default model (see
:mod:`.registration`).

Every field is checked on construction; an impossible value raises ``ValueError`` naming the
setting and the value, before any training starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.declare import setting
from ..core.validation import SettingError, check_choice, check_integer, check_range
from .lr_rules import LR_STRATEGIES

__all__ = ["LoRAWorkloadConfig", "FedMeZOConfig", "LoRAFedAvgConfig", "LR_STRATEGIES", "COMM_MODES", "WEIGHTINGS", "RESTORE_MODES",
           "Z_DEVICES", "ADAPTER_DTYPES", "VARIANTS"]

COMM_MODES = ("params", "seeds")
#: How a client restores the tuned tensors after a perturbation (:class:`~.engine.MeZOEngine`).
RESTORE_MODES = ("snapshot", "regenerate")
#: Update rules: the paper's (Eq. 3, fused, in place) and the official code's (see :mod:`.engine`).
VARIANTS = ("paper", "code")
#: Where the directions z are drawn (:mod:`.zseed`).
Z_DEVICES = ("cpu", "param")
WEIGHTINGS = ("uniform", "num_examples")
#: Data type of the LoRA adapters. The official code's precision is the whole model in fp16
#: (``model.half()``): ``base_dtype="fp16"`` and ``adapter_dtype="fp16"`` (the registry's ``variant=code``).
ADAPTER_DTYPES = ("fp32", "fp16", "bf16")


def _steps_or_epochs(local_steps, local_epochs) -> None:
    if local_steps is None and local_epochs is None:
        raise SettingError("local_steps", None, "an integer >= 1 when local_epochs is not set")
    if local_steps is not None and local_epochs is not None:
        raise SettingError("local_epochs", local_epochs, f"None when local_steps is set (local_steps={local_steps!r})")
    if local_steps is not None:
        check_integer("local_steps", local_steps, 1)
    else:
        check_integer("local_epochs", local_epochs, 1)


_YAML = "llm/baseline/frozen/dolly/dolly_mezo_meta.yaml"
_BP_YAML = "llm/baseline/frozen/dolly/dolly_bpbased_meta.yaml"
_VARIANT = ("project: 'paper' = the paper's method in fp32; 'code' = the official code's arithmetic and half "
            "precision (the fedmezo-code preset)")


@dataclass(frozen=True)
class FedMeZOConfig:
    """FedMeZO: FedAvg of LoRA adapters that each client tunes with MeZO zeroth-order steps."""

    lr: float = setting(1e-5, "> 0", "paper: App. E.3 (lr 1e-5 for OpenLLaMA-3B)",
                        "Base client learning rate eta0 (the paper: 1e-5 Dolly/Alpaca, 2e-5 CodeAlpaca, 2.5e-5 "
                        "GSM8K). With a personalised ``lr_strategy`` client i gets ``eta0 + alpha * Phi_i``.")
    local_steps: int | None = setting(30, ">= 1 or None", "paper: Sec. 5.3.2 (the standard H = 30 local steps)",
                                      "H, MeZO steps per round. Exactly one of ``local_steps``/``local_epochs``.")
    local_epochs: int | None = setting(None, ">= 1 or None", "paper: Sec. 5.3.2 (the local budget is H steps)",
                                       "Alternatively, passes over the local data per round (``ceil(n_i / "
                                       "batch_size)`` steps each). Not with ``comm_mode=\"seeds\"``.")
    batch_size: int = setting(1, ">= 1", "paper: App. E.3 (batch size 1)",
                              "Examples per MeZO step; both forward passes use the same batch.")
    mu: float = setting(1e-3, "> 0", "paper: App. E.3 (mu = 1e-3, following MeZO)",
                        "Perturbation scale (MeZO's epsilon, the code's ``zo_eps``).")
    weight_decay: float = setting(0.0, ">= 0", f"official code: {_YAML} (weight_decay: 0.0)",
                                  "Decoupled weight decay of the MeZO update; skipped for bias/LayerNorm tensors "
                                  "(the name match follows ``variant``).")
    lr_decay: float = setting(1.0, "(0, 1]", f"official code: {_YAML} (train_strategy 'frozen': a constant rate)",
                              "Per-round factor of eta0 and alpha (round t uses ``lr * lr_decay**(t-1)``).")
    num_perturbations: int = setting(1, ">= 1", "official code: llm/trainer/mezo_trainer.py (one direction per step)",
                                     "n, directions averaged per step (n-SPSA, 2n forward passes; the paper follows "
                                     "MeZO's one).")
    lr_strategy: str = setting("frozen", "frozen, five-round, ...", "official code: train_strategy 'frozen' "
                                                                    f"({_YAML}), the static rate of the main results",
                               "Personalised rates (paper Proposition 3.7, Fig. 4): ``frozen`` (eta0 for all), "
                               "``random``, ``round-wise``, ``five-round`` or ``model-diff``.")
    lr_alpha: float = setting(5e-6, ">= 0", "official code: federatedscope/core/trainers/trainer.py "
                                            "(lr + 0.000005 * Phi)",
                              "Absolute spread alpha of the personalised rates, ``0 <= alpha < lr``. Unused with "
                              "``frozen``.")
    lr_alpha_rel: float | None = setting(None, ">= 0 or None", "project: None = the official absolute lr_alpha; the "
                                                               "paper's relative eta0 (1 + alpha Phi) (Prop. 3.7) is "
                                                               "lr_alpha_rel",
                                         "The paper's relative form instead: ``alpha = lr_alpha_rel * lr``, in [0, "
                                         "1) (0.5 equals the code's 5e-6 at lr 1e-5). Overrides ``lr_alpha`` when "
                                         "set.")
    lr_window: int = setting(5, ">= 1", "official code: federatedscope/core/trainers/trainer.py (five-round: the "
                                        "last 5 rounds)",
                             "Rounds averaged by ``five-round``.")
    weighting: str = setting("uniform", "uniform, num_examples", "paper: Sec. 2.2 (FedAvg over the N clients of "
                                                                 "f = (1/N) sum_i f_i)",
                             "``uniform`` (the paper's 1/N) or ``num_examples`` (the reference's sample-weighted "
                             "mean, equal when every client runs H steps of batch B).")
    comm_mode: str = setting("params", "params, seeds", "paper: App. F.1 (clients upload their LoRA weights)",
                             "``params``: clients upload their LoRA tensors (the paper). ``seeds``: an extension NOT"
                             " in the paper: clients upload their (seed, coefficient) pairs, 16 bytes per step, and "
                             "the server replays them (bit-identical with ``restore_mode=\"snapshot\"``). Needs "
                             "``weight_decay=0``, ``z_device=\"cpu\"`` and ``local_steps``.")
    z_device: str = setting("cpu", "cpu, param", "project: directions drawn on the CPU are identical on every "
                                                 "machine (seed replay)",
                            "Where the directions are drawn: ``cpu`` (portable, replayable anywhere) or ``param`` "
                            "(the parameter's device, in its dtype; faster on GPU, and the official code's draw).")
    restore_mode: str = setting("snapshot", "snapshot, regenerate", "project: a bit-exact restore from a copy of the "
                                                                    "tuned tensors",
                                "``snapshot`` (copy back, bit-exact) or ``regenerate`` (MeZO's ``+mu z``, 1-ulp "
                                "drift; the official code's).")
    eval_every: int = setting(10, ">= 1", f"official code: {_YAML} (eval freq: 10)",
                              "Central evaluation period in rounds (round 0 and the last round are always "
                              "evaluated).")
    variant: str = setting("paper", "paper, code", _VARIANT,
                           "The clients' update rule: ``paper`` (Eq. 3 applied in place in one fused step; weight "
                           "decay skipped for bias/LayerNorm tensors in any letter case) or ``code`` (the official "
                           "``mezo_trainer.py`` arithmetic: ``g`` from the loss tensors in the model's dtype, "
                           "``theta - lr (g z + wd theta)`` as written, and the case-sensitive name match). Sent to "
                           "the clients; see :mod:`.engine`.")

    def __post_init__(self) -> None:
        check_range("lr", self.lr, low=0.0, low_open=True)
        _steps_or_epochs(self.local_steps, self.local_epochs)
        check_integer("batch_size", self.batch_size, 1)
        check_range("mu", self.mu, low=0.0, low_open=True)
        check_range("weight_decay", self.weight_decay, low=0.0)
        check_range("lr_decay", self.lr_decay, low=0.0, low_open=True, high=1.0)
        check_integer("num_perturbations", self.num_perturbations, 1)
        check_choice("lr_strategy", self.lr_strategy, LR_STRATEGIES)
        check_range("lr_alpha", self.lr_alpha, low=0.0)
        if self.lr_alpha_rel is not None:
            check_range("lr_alpha_rel", self.lr_alpha_rel, low=0.0, high=1.0, high_open=True)
        if self.lr_strategy != "frozen" and not self.alpha < self.lr:
            raise ValueError(f"lr_alpha must be < lr so that every personalised rate stays > 0, got lr_alpha="
                             f"{self.alpha!r} with lr={self.lr!r}")
        check_integer("lr_window", self.lr_window, 1)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_choice("comm_mode", self.comm_mode, COMM_MODES)
        check_choice("z_device", self.z_device, Z_DEVICES)
        check_choice("restore_mode", self.restore_mode, RESTORE_MODES)
        check_integer("eval_every", self.eval_every, 1)
        check_choice("variant", self.variant, VARIANTS)
        if self.comm_mode == "seeds":
            if self.weight_decay != 0:
                raise ValueError(f"comm_mode='seeds' needs weight_decay=0 (the update is then linear in the "
                                 f"directions), got weight_decay={self.weight_decay!r}")
            if self.z_device != "cpu":
                raise ValueError(f"comm_mode='seeds' needs z_device='cpu' (directions drawn on the client's device "
                                 f"cannot be replayed on the server), got z_device={self.z_device!r}")
            if self.variant != "paper":
                raise ValueError(f"comm_mode='seeds' needs variant='paper' (the server replays the paper's update), "
                                 f"got variant={self.variant!r}")
            if self.local_steps is None:
                raise ValueError("comm_mode='seeds' needs local_steps (the server checks the uploaded seeds against "
                                 f"the round's H steps), got local_epochs={self.local_epochs!r}")

    @property
    def alpha(self) -> float:
        """Absolute spread of the personalised rates at round 1 (0 for ``frozen``)."""
        if self.lr_strategy == "frozen":
            return 0.0
        return self.lr_alpha_rel * self.lr if self.lr_alpha_rel is not None else self.lr_alpha

    def client_config(self) -> dict:
        """The method constants every client gets (Flower Scalars only)."""
        return {"mu": float(self.mu), "weight_decay": float(self.weight_decay),
                "num_perturbations": int(self.num_perturbations), "restore_mode": self.restore_mode,
                "z_device": self.z_device, "comm_mode": self.comm_mode, "local_steps": int(self.local_steps or 0),
                "local_epochs": int(self.local_epochs or 0), "batch_size": int(self.batch_size),
                "variant": self.variant}


@dataclass(frozen=True)
class LoRAFedAvgConfig:
    """LoRA FedAvg: the paper's backprop baseline ("BP-based FedAvg"), plain SGD on the LoRA adapters."""

    lr: float = setting(1e-5, "> 0", "paper: App. E.3 (the same rate as FedMeZO)", "Client SGD learning rate.")
    local_steps: int | None = setting(30, ">= 1 or None", f"official code: {_BP_YAML} (local_update_steps 30, as FedMeZO; "
                                                          "the paper's text says one epoch)",
                                      "SGD steps per round. Exactly one of ``local_steps``/``local_epochs``.")
    local_epochs: int | None = setting(None, ">= 1 or None", f"official code: {_BP_YAML} (30 batches)",
                                       "Alternatively, local epochs per round.")
    batch_size: int = setting(1, ">= 1", "paper: App. E.3 (batch size 1)", "Minibatch size.")
    weight_decay: float = setting(0.0, ">= 0", f"official code: {_BP_YAML} (weight_decay: 0.0)", "SGD weight decay.")
    momentum: float = setting(0.0, "[0, 1)", f"official code: {_BP_YAML} (FederatedScope's SGD without momentum)",
                              "SGD momentum (reset every round).")
    lr_decay: float = setting(1.0, "(0, 1]", f"official code: {_BP_YAML} (a constant rate)",
                              "Per-round learning-rate factor.")
    grad_clip: float | None = setting(None, "> 0 or None", f"official code: {_BP_YAML} (no gradient clipping)",
                                      "Gradient-norm bound, or None for no clipping.")
    weighting: str = setting("uniform", "uniform, num_examples", "paper: Sec. 2.2 (FedAvg over the N clients of "
                                                                 "f = (1/N) sum_i f_i)",
                             "``uniform`` or ``num_examples``.")
    eval_every: int = setting(10, ">= 1", f"official code: {_YAML} (eval freq: 10)",
                              "Central evaluation period in rounds.")

    def __post_init__(self) -> None:
        check_range("lr", self.lr, low=0.0, low_open=True)
        _steps_or_epochs(self.local_steps, self.local_epochs)
        check_integer("batch_size", self.batch_size, 1)
        check_range("weight_decay", self.weight_decay, low=0.0)
        check_range("momentum", self.momentum, low=0.0, high=1.0, high_open=True)
        check_range("lr_decay", self.lr_decay, low=0.0, low_open=True, high=1.0)
        if self.grad_clip is not None:
            check_range("grad_clip", self.grad_clip, low=0.0, low_open=True)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_integer("eval_every", self.eval_every, 1)

    @property
    def alpha(self) -> float:
        return 0.0

    def client_config(self) -> dict:
        out = {"weight_decay": float(self.weight_decay), "momentum": float(self.momentum),
               "local_steps": int(self.local_steps or 0), "local_epochs": int(self.local_epochs or 0),
               "batch_size": int(self.batch_size)}
        if self.grad_clip is not None:
            out["grad_clip"] = float(self.grad_clip)
        return out


@dataclass(frozen=True)
class LoRAWorkloadConfig:
    """The language-model workload of ``fedmezo`` and ``lora-fedavg`` on the command line: the
    base model, its LoRA adapters and the generated data (``--set key=value``; checked when the
    workload is built, ``simulations.lm.task.LMSettings``)."""

    variant: str = setting("paper", "paper, code", _VARIANT,
                           "``paper`` or ``code`` (the official code's half precision).")
    model_dir: str = setting("", "a folder, or ''", "project: '' = the cached tiny LLaMA-architecture base (no hub "
                                                    "download); the paper's OpenLLaMA-3B via --model DIR",
                             "Local checkpoint folder; \"\" = the cached tiny LLaMA-architecture base.")
    lora_r: int = setting(128, ">= 1", "paper: App. E.3 (LoRA rank 128)", "LoRA rank.")
    lora_alpha: int = setting(256, "> 0", "paper: App. E.3 (LoRA alpha 256)", "LoRA scaling numerator.")
    lora_dropout: float = setting(0.05, "[0, 1)", f"official code: {_YAML} (lora_dropout: 0.05)", "LoRA dropout.")
    lora_targets: str = setting("q_proj,v_proj", "comma-separated module names",
                                "official code: llm/model/adapter_builder.py passes no target_modules, so PEFT's "
                                "LLaMA default (q_proj, v_proj) applies",
                                "Comma-separated module-name suffixes that get adapters.")
    max_len: int = setting(320, ">= 8", f"project: the tiny base's byte tokenizer; the official tok_len is 1000 ({_YAML})",
                           "Token length limit of an example.")
    base_dtype: str = setting("fp32", "fp32, fp16, bf16", "project: fp32 on CPU; the paper loads the model in 16 bits "
                                                          "(App. E.2): variant=code",
                              "Data type of the base model: ``fp32``, ``fp16`` or ``bf16``.")
    adapter_dtype: str = setting("fp32", "fp32, fp16, bf16", "project: fp32 adapters keep updates of 1e-5 that fp16 "
                                                             "rounds away; fp16 with the whole model is variant=code",
                                 "Data type of the LoRA adapters: ``fp32``, ``fp16`` or ``bf16``.")
    n_examples: int = setting(1200, ">= 2", "project: generated examples (--dataset instructions only)",
                              "Generated examples (``--dataset instructions`` only).")
    test_fraction: float = setting(1 / 12, "(0, 1)", "project: 100 of the 1,200 generated examples; the paper holds "
                                                     "out 1% (App. E.1)",
                                   "Fraction held out as the central test split.")
