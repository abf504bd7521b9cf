"""FedMeZO: zeroth-order (MeZO) federated LoRA tuning of language models, and its backprop
baseline LoRA FedAvg.

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926).

- :mod:`.config`       -- validated hyperparameters (paper defaults): ``FedMeZOConfig``, ``LoRAFedAvgConfig``.
- :mod:`.zseed`        -- seed derivation and seed-regenerated Gaussian directions ``z``.
- :mod:`.engine`       -- the MeZO step (perturb in place, two forwards, projected gradient, update).
- :mod:`.local`        -- the stateless data cursor and a plain local-round loop.
- :mod:`.replay`       -- (seed, scalar) upload: encoding and server-side replay (an extension).
- :mod:`.lr_rules`     -- personalised learning-rate rules (Proposition 3.7).
- :mod:`.accounting`   -- LoRA size / payload arithmetic and the paper's theory constants.
- :mod:`.server`       -- the framework-neutral server cores ``FedMeZOServer``, ``LoRAFedAvgServer``.
- :mod:`.strategy`     -- legacy Flower strategies ``FedMeZO``, ``LoRAFedAvg``.
- :mod:`.serverapp`    -- Message-API strategies ``FedMeZO``, ``LoRAFedAvg``.
- :mod:`.registration` -- the ``fedmezo`` and ``lora-fedavg`` registry entries.

The client pieces (the ``MeZO`` optimizer, payload helpers, ready-made clients) are in
``flwr_strategies.clients.fedmezo``.
"""

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".config": ("FedMeZOConfig", "LoRAFedAvgConfig"),
    ".engine": ("MeZOEngine", "StepResult", "trainable_named_params"),
    ".lr_rules": ("PersonalisedLR", "normalise_signals", "personalised_lrs"),
    ".replay": ("decode_pairs", "encode_pairs", "replay_updates"),
    ".server": ("FedMeZOServer", "LoRAFedAvgServer", "lora_positions"),
    ".zseed": ("derive_seed", "make_generator", "z_like"),
})
__all__ = sorted(_EXPORTS)
