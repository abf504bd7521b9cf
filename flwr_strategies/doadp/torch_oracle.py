"""Per-sample gradients of a PyTorch model at a flat float64 parameter vector (for DO-ADP's reference
simulator), with the client's own functions (:func:`flwr_strategies.clients.doadp.per_sample_gradients`:
``torch.func``, so per-sample clipping works for any model without BatchNorm; buffers are kept from the
model and not part of the flat vector), so the simulator and the Flower clients compute the same gradients.
"""

from __future__ import annotations

import numpy as np
import torch

from ..clients.doadp import flat_parameters, load_flat_parameters, per_sample_gradients


class TorchGradOracle:
    """``per_sample_grads(x_flat, idx) -> (b, d)`` float64 for one agent's data.

    Parameters
    ----------
    model : torch.nn.Module
        Model whose trainable parameters (in ``named_parameters`` order) form the flat vector.
    x, y : torch.Tensor
        Local data (features, integer labels), moved to ``device``.
    device : str | torch.device (default: "cpu")
        Where the per-sample gradients are computed (the result always comes back as CPU float64).
    """

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device="cpu"):
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.x, self.y = x.to(self.device), y.to(self.device)
        self.d = int(sum(p.numel() for p in model.parameters()))

    @property
    def q(self) -> int:
        return int(self.x.shape[0])

    def per_sample_grads(self, x_flat: np.ndarray, idx: np.ndarray) -> np.ndarray:
        ii = torch.as_tensor(np.asarray(idx), dtype=torch.long, device=self.device)
        return per_sample_gradients(self.model, torch.nn.functional.cross_entropy, self.x[ii], self.y[ii], x_flat)

    def flat_params(self) -> np.ndarray:
        return flat_parameters(self.model)

    def load_flat(self, x_flat: np.ndarray) -> None:
        """Write a flat vector into the model's parameters (for evaluation)."""
        load_flat_parameters(self.model, x_flat)


class TorchNetworkProblem:
    """Simulator problem over n agents' torch data shards sharing one model architecture."""

    def __init__(self, model: torch.nn.Module, shards: list[tuple[torch.Tensor, torch.Tensor]], device="cpu"):
        self.oracles = [TorchGradOracle(model, x, y, device) for x, y in shards]
        qs = {o.q for o in self.oracles}
        self.q = min(qs)
        self.n = len(shards)
        self.d = self.oracles[0].d

    def per_sample_grads(self, i: int, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.oracles[i].per_sample_grads(x, idx)
