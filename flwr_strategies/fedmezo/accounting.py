"""LoRA size / payload arithmetic and the paper's theory constants (documentation helpers)."""

from __future__ import annotations

import math


def count_lora_params(hidden: int, layers: int, r: int, targets: int = 2) -> int:
    """LoRA parameters for square ``hidden x hidden`` targets: ``layers*targets*r*(hidden+hidden)``."""
    return int(layers) * int(targets) * int(r) * (2 * int(hidden))


def payload_bytes(n_params: int, bytes_per_param: int = 2) -> int:
    """Upload size of ``n_params`` values (fp16 by default, as in the paper)."""
    return int(n_params) * int(bytes_per_param)


def gamma(d: int, r: float, n: int = 1) -> float:
    """``(d r + d - 2) / (n (d + 2))`` (paper's low-rank gradient factor)."""
    return (d * r + d - 2) / (n * (d + 2))


def zeta(d: int, r: float, n: int = 1) -> float:
    """``(d + 2) n^2 / ((d r + d - 2)(d + n - 1))`` (paper's estimator factor)."""
    return (d + 2) * n * n / ((d * r + d - 2) * (d + n - 1))


def lr_sqrt_d_heuristic(d: int) -> float:
    """The paper's learning-rate guide ``1/sqrt(d)``."""
    return 1.0 / math.sqrt(d)
