"""DO-ADP: decentralized momentum SGD with differential privacy amplified by random activation and
Top-k sparsified messages (Huo, Liu, Ding, Johansson, Shi, "Decentralized Optimization with
Amplified Privacy via Efficient Communication").

Framework-neutral math lives here (Algorithm 1, Top-k, clipping, reference simulator, baselines,
theory helpers); privacy accounting is in :mod:`flwr_strategies.privacy`.
"""

from .algorithm import (
    AgentState,
    DOADPParams,
    StepResult,
    active_update,
    agent_step,
    consensus_terms,
    inactive_update,
    message_nbytes,
)
from .clipping import clip_per_sample
from .rng import activation_mask, agent_rng, draw_samples
from .simulator import DOADPNetwork, check_mixing, run_dmsgd, run_doadp
from .sparsify import densify, rand_k, top_k, top_k_dense, top_k_indices

__all__ = [
    "AgentState", "DOADPParams", "StepResult", "active_update", "agent_step", "consensus_terms",
    "inactive_update", "message_nbytes", "clip_per_sample", "activation_mask", "agent_rng",
    "draw_samples", "DOADPNetwork", "check_mixing", "run_dmsgd", "run_doadp", "densify", "rand_k",
    "top_k", "top_k_dense", "top_k_indices",
]
