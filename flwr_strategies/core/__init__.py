"""Framework-neutral core shared by every method: messages, validation, server base, checkpoints.

Nothing in this package imports Flower, the client layer or the simulation layer.
"""

from .messages import ArraySpec, Instruction, Reply, ReplySpec, numeric_metrics
from .server import ConfigFn, EvalFn, RoundResult, ServerCore
from .state import load_state, save_state
from .validation import BAD_REPLY_POLICIES, Rejection, ReplyError, check_policy, screen

__all__ = [
    "ArraySpec", "BAD_REPLY_POLICIES", "ConfigFn", "EvalFn", "Instruction", "Rejection", "Reply", "ReplyError",
    "ReplySpec", "RoundResult", "ServerCore", "check_policy", "load_state", "numeric_metrics", "save_state",
    "screen",
]
