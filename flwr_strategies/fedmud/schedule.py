"""Reset ("push") schedule of FedMUD (Li et al., ICML 2025, Section 3.1: merge and re-initialise every ``s`` rounds).

Round ``t`` (1-indexed, Flower's ``server_round``) folds the averaged update into ``W_base`` and
re-initialises the factors iff ``t >= 2 and (t - 1) % s == 0``; round 1 never pushes.
"""

from __future__ import annotations

from ..core.validation import check_integer

__all__ = ["validate_reset_interval", "is_push_round"]


def validate_reset_interval(reset_interval) -> int:
    """Return ``reset_interval`` as int if it is an integer >= 1, else raise ``ValueError``."""
    return check_integer("reset_interval", reset_interval, 1)


def is_push_round(server_round: int, reset_interval: int) -> bool:
    """``True`` iff round ``server_round`` starts with merge + reset."""
    s = validate_reset_interval(reset_interval)
    return server_round >= 2 and (server_round - 1) % s == 0
