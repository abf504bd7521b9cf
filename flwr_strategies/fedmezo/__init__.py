"""FedMeZO: zeroth-order (MeZO) federated LoRA tuning of language models.

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926).

Framework-neutral core (torch in, torch out):

- :mod:`.zseed`     -- seed derivation and seed-regenerated Gaussian directions ``z``.
- :mod:`.engine`    -- the MeZO step (perturb in place, two forwards, projected gradient, update).
- :mod:`.replay`    -- (seed, scalar) upload: encoding and server-side replay.
- :mod:`.lr_rules`  -- personalised learning-rate rules (Proposition 3.7).
- :mod:`.accounting`-- LoRA size / payload arithmetic and the paper's theory constants.
"""

from .engine import MeZOEngine, StepResult, trainable_named_params
from .lr_rules import PersonalisedLR, normalise_signals, personalised_lrs
from .replay import decode_pairs, encode_pairs, replay_updates
from .zseed import derive_seed, make_generator, z_like

__all__ = [
    "MeZOEngine",
    "StepResult",
    "trainable_named_params",
    "PersonalisedLR",
    "normalise_signals",
    "personalised_lrs",
    "encode_pairs",
    "decode_pairs",
    "replay_updates",
    "derive_seed",
    "make_generator",
    "z_like",
]
