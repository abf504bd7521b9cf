"""Aggregation of client-reported metrics."""

from __future__ import annotations

from flwr.common import Scalar

SKIP_KEYS = frozenset({"partition-id"})


def weighted_mean_metrics(results: list[tuple[int, dict[str, Scalar]]]) -> dict[str, Scalar]:
    """Example-weighted mean of every numeric metric (``partition-id`` excluded)."""
    total = sum(n for n, _ in results)
    if total == 0:
        return {}
    keys = sorted({k for _, m in results for k, v in m.items() if k not in SKIP_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)})
    out: dict[str, Scalar] = {}
    for key in keys:
        pairs = [(n, float(m[key])) for n, m in results if key in m]
        weight = sum(n for n, _ in pairs)
        if weight:
            out[key] = sum(n * v for n, v in pairs) / weight
    return out
