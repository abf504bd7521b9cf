"""Reset ("push") schedule of FedMUD (Li et al., ICML 2025, Section 3.1: merge and re-initialise every ``s`` rounds).

Round ``t`` (1-indexed, Flower's ``server_round``) folds the averaged update into ``W_base`` and
re-initialises the factors iff ``t >= 2 and (t - 1) % s == 0``; round 1 never pushes.
"""

from __future__ import annotations

__all__ = ["validate_reset_interval", "is_push_round"]


def validate_reset_interval(reset_interval) -> int:
    """Return ``reset_interval`` as int if it is an integer >= 1, else raise ``ValueError``."""
    if isinstance(reset_interval, bool) or int(reset_interval) != reset_interval or int(reset_interval) < 1:
        raise ValueError(f"reset_interval must be an integer >= 1, got {reset_interval!r}")
    return int(reset_interval)


def is_push_round(server_round: int, reset_interval: int) -> bool:
    """``True`` iff round ``server_round`` starts with merge + reset."""
    s = validate_reset_interval(reset_interval)
    return server_round >= 2 and (server_round - 1) % s == 0
