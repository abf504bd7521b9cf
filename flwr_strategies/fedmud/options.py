"""Validated hyper-parameters shared by FedMUD's strategy and client (spec 004, Section 11)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from .aggregation import WEIGHTINGS
from .schedule import validate_reset_interval
from .seeds import INIT_DISTS
from .sizing import DECOMPS, PATTERNS, validate_ratio

__all__ = ["MUDOptions", "METHOD_OPTIONS", "BASE_INITS"]

BASE_INITS = ("normal", "kaiming", "given")


@dataclass(frozen=True)
class MUDOptions:
    """Options of FedMUD and of the low-rank baselines built on the same machinery.

    Parameters
    ----------
    decomp : {"kron", "mat", "hadamard"} (default "kron")
        Block-wise Kronecker (BKD) or matrix low-rank factors; "hadamard" is FedPara's form.
    pattern : {"aad", "ab", "freeze"} (default "aad")
        Update structure: aggregation-aware decoupling, plain product, or frozen left factor (+F).
    target_ratio : float in (0, 1] (default 1/32)
        Whole-model communication ratio ``P_payload / P_dense`` met by the per-layer search.
    init_scale : float > 0, optional
        ``a`` of the random factors' ``Uniform(-a, a)``; default 5.0 for kron, 0.1 otherwise.
    init_dist : {"uniform", "normal"} (default "uniform")
    reset_interval : int >= 1 or None (default 1)
        ``s``: merge + reset every ``s`` rounds (round ``t`` pushes iff ``t >= 2`` and
        ``(t-1) % s == 0``); None never resets (FedLMT, FedPara, FedHM).
    skip_first, skip_last : int >= 0 (default 1, 1)
        Linear/conv layers kept dense at the front / back.
    weighting : {"num_examples", "uniform"} (default "num_examples")
    zero_base : bool (default False)
        ``W_base = 0``: the factors parametrise the weight itself (FedLMT, FedPara, FedHM).
    random_right : bool (default False)
        Pattern "ab": draw the right factor at random too (FedLMT).
    base_init : {"normal", "kaiming", "given"} (default "normal")
        Initial ``W_base`` of compressed layers, regenerated from ``base_seed`` by every party so it
        is never sent: "normal" = ``Normal(0, base_std)`` (reference code, spec 4.3), "kaiming" =
        PyTorch's default ``Uniform(+-1/sqrt(fan_in))``; "given" keeps the supplied initial weights
        (they are then sent once to each client, counted as traffic).
    base_std : float > 0 (default 0.01)
    strict_ratio : bool (default True)
        Raise when ``target_ratio`` is unreachable (else accept the floor like the code).
    fedhm : bool (default False)
        FedHM: the server keeps full weights, factorises them by truncated SVD every round and
        averages the recovered products.
    """

    decomp: str = "kron"
    pattern: str = "aad"
    target_ratio: float = 1 / 32
    init_scale: float | None = None
    init_dist: str = "uniform"
    reset_interval: int | None = 1
    skip_first: int = 1
    skip_last: int = 1
    weighting: str = "num_examples"
    zero_base: bool = False
    random_right: bool = False
    base_init: str = "normal"
    base_std: float = 0.01
    strict_ratio: bool = True
    fedhm: bool = False

    def __post_init__(self):
        if self.decomp not in DECOMPS:
            raise ValueError(f"decomp must be one of {DECOMPS}, got {self.decomp!r}")
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")
        object.__setattr__(self, "target_ratio", validate_ratio(self.target_ratio))
        if self.init_scale is not None and not (float(self.init_scale) > 0 and math.isfinite(float(self.init_scale))):
            raise ValueError(f"init_scale must be a finite number > 0, got {self.init_scale!r}")
        if self.init_dist not in INIT_DISTS:
            raise ValueError(f"init_dist must be one of {INIT_DISTS}, got {self.init_dist!r}")
        if self.reset_interval is not None:
            object.__setattr__(self, "reset_interval", validate_reset_interval(self.reset_interval))
        for name in ("skip_first", "skip_last"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        if self.base_init not in BASE_INITS:
            raise ValueError(f"base_init must be one of {BASE_INITS}, got {self.base_init!r}")
        if not self.base_std > 0:
            raise ValueError(f"base_std must be > 0, got {self.base_std!r}")
        if self.random_right and self.pattern != "ab":
            raise ValueError("random_right needs pattern='ab'")

    @property
    def scale(self) -> float:
        if self.init_scale is not None:
            return float(self.init_scale)
        return 5.0 if self.decomp == "kron" else 0.1

    def with_overrides(self, overrides: Mapping[str, Any]) -> "MUDOptions":
        return replace(self, **dict(overrides))


# method name -> options (the six FedMUD variants and the low-rank baselines)
METHOD_OPTIONS: dict[str, MUDOptions] = {
    "fedmud": MUDOptions(),  # FedMUD+BKD+AAD, the paper's best; every option settable
    "fedmud_mat": MUDOptions(decomp="mat", pattern="ab"),  # the paper's plain "FedMUD"
    "fedmud_f": MUDOptions(decomp="mat", pattern="freeze"),
    "fedmud_aad": MUDOptions(decomp="mat", pattern="aad"),
    "fedmud_bkd": MUDOptions(decomp="kron", pattern="ab"),
    "fedmud_bkd_f": MUDOptions(decomp="kron", pattern="freeze"),
    "fedmud_bkd_aad": MUDOptions(decomp="kron", pattern="aad"),
    "fedlmt": MUDOptions(decomp="mat", pattern="ab", reset_interval=None, zero_base=True, random_right=True),
    "fedpara": MUDOptions(decomp="hadamard", pattern="ab", reset_interval=None, zero_base=True, init_scale=1.0),
    "fedhm": MUDOptions(decomp="mat", pattern="ab", reset_interval=None, zero_base=True, random_right=True, fedhm=True),
}
