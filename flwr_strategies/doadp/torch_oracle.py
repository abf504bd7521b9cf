"""Per-sample gradients of a PyTorch model at a flat float64 parameter vector (for DO-ADP).

Uses ``torch.func`` (functional_call + vmap(grad)), so per-sample clipping works for any model
without BatchNorm. Buffers are kept from the model and not part of the flat vector.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.func import functional_call, grad, vmap


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
        self.names = [n for n, _ in model.named_parameters()]
        self.shapes = [p.shape for _, p in model.named_parameters()]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.d = int(sum(self.sizes))
        self.buffers = dict(model.named_buffers())

        def loss(params, xb, yb):
            out = functional_call(self.model, (params, self.buffers), (xb.unsqueeze(0),))
            return torch.nn.functional.cross_entropy(out, yb.unsqueeze(0))

        self._ps = vmap(grad(loss), in_dims=(None, 0, 0))

    @property
    def q(self) -> int:
        return int(self.x.shape[0])

    def unflatten(self, x_flat: np.ndarray) -> dict[str, torch.Tensor]:
        t = torch.from_numpy(np.asarray(x_flat, dtype=np.float32)).to(self.device)
        out, off = {}, 0
        for n, s, k in zip(self.names, self.shapes, self.sizes):
            out[n] = t[off:off + k].view(s)
            off += k
        return out

    def per_sample_grads(self, x_flat: np.ndarray, idx: np.ndarray) -> np.ndarray:
        params = self.unflatten(x_flat)
        ii = torch.as_tensor(np.asarray(idx), dtype=torch.long, device=self.device)
        g = self._ps(params, self.x[ii], self.y[ii])
        return torch.cat([g[n].reshape(len(ii), -1) for n in self.names], dim=1).double().cpu().numpy()

    def flat_params(self) -> np.ndarray:
        return torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).double().cpu().numpy()

    def load_flat(self, x_flat: np.ndarray) -> None:
        """Write a flat vector into the model's parameters (for evaluation)."""
        with torch.no_grad():
            for p, v in zip(self.model.parameters(), self.unflatten(x_flat).values()):
                p.copy_(v)


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
