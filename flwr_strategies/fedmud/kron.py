"""Block-wise Kronecker decomposition (BKD) of FedMUD.

Li et al., "The Panaceas for Improving Low-Rank Decomposition in Communication-Efficient
Federated Learning", ICML 2025, Section 4.2.

The update of an ``m x n`` weight is built from ``nb`` pairs of square ``z x z`` factors with the
reference code's *stacked-flatten-crop* layout: the ``nb`` Kronecker blocks ``A_b (x) B_b`` are
stacked along a leading axis, flattened row-major, the first ``m * n`` entries are kept and the
result is reshaped row-major to ``(m, n)``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["batched_kron", "bkd_blocks", "bkd_delta", "bkd_side", "crop_to_matrix"]


def bkd_side(numel: int, nb: int) -> int:
    """Return the smallest integer ``z`` with ``nb * z**4 >= numel`` (integer-robust)."""
    if numel < 1 or nb < 1:
        raise ValueError(f"bkd_side needs numel >= 1 and nb >= 1, got numel={numel}, nb={nb}")
    z = max(1, math.ceil((numel / nb) ** 0.25))
    while z > 1 and nb * (z - 1) ** 4 >= numel:
        z -= 1
    while nb * z**4 < numel:
        z += 1
    return z


def bkd_blocks(numel: int, rho: float) -> tuple[int, int]:
    """Block count and side for a layer of ``numel`` weights at per-layer ratio ``rho``.

    ``nb = ceil(rho**2 * numel / 4)`` (at least 1) and ``z = bkd_side(numel, nb)``, so that the two
    factors hold ``2 * nb * z**2 ~= rho * numel`` scalars (the paper's per-layer ratio ``rho``).
    """
    nb = max(1, math.ceil(rho * rho * numel / 4))
    return nb, bkd_side(numel, nb)


def batched_kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Kronecker product of each pair of blocks: ``(nb, z, z) x (nb, z, z) -> (nb, z*z, z*z)``.

    ``out[b, i*z + j, p*z + q] = a[b, i, p] * b[b, j, q]``, i.e. every slice equals
    ``torch.kron(a[b], b[b])``.
    """
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"batched_kron needs (nb, z1, z2) tensors with equal nb, got {tuple(a.shape)} and {tuple(b.shape)}")
    nb, ar, ac = a.shape
    _, br, bc = b.shape
    return torch.einsum("nip,njq->nijpq", a, b).reshape(nb, ar * br, ac * bc)


def crop_to_matrix(blocks: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """Flatten stacked blocks row-major, keep the first ``m * n`` entries, reshape to ``(m, n)``."""
    flat = blocks.reshape(-1)
    if flat.numel() < m * n:
        raise ValueError(f"{flat.numel()} block entries cannot fill a {m}x{n} matrix")
    return flat[: m * n].reshape(m, n)


def bkd_delta(a: torch.Tensor, b: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """``crop(stack_b(a_b (x) b_b))`` reshaped to ``(m, n)`` (the code's BKD layout)."""
    return crop_to_matrix(batched_kron(a, b), m, n)
