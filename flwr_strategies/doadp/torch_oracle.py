"""Per-sample gradients of a PyTorch model at a flat float64 parameter vector, for DO-ADP's Flower
clients (:mod:`flwr_strategies.clients.doadp`) and its reference simulator alike, so both compute the
same gradients (``torch.func``, so per-sample clipping works for any model without BatchNorm; buffers
are kept from the model and not part of the flat vector).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.func import functional_call, grad, vmap


def flat_parameters(model: torch.nn.Module) -> np.ndarray:
    """The model's parameters as one float64 vector (``named_parameters`` order)."""
    return torch.cat([p.detach().reshape(-1).double().cpu() for p in model.parameters()]).numpy()


def load_flat_parameters(model: torch.nn.Module, vec: np.ndarray) -> None:
    """Write a flat vector into the model's parameters in place."""
    vec = np.asarray(vec)
    pos = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(torch.from_numpy(np.ascontiguousarray(vec[pos:pos + n])).view_as(p).to(p.dtype))
            pos += n
    if pos != vec.size:
        raise ValueError(f"vector has {vec.size} entries, the model has {pos} parameters")


def per_sample_gradients(model: torch.nn.Module, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor,
                         params: np.ndarray | None = None) -> np.ndarray:
    """Per-sample gradients ``(len(x), d)`` float64 of ``loss_fn(model(x_i), y_i)``.

    ``params`` (a flat vector) evaluates them at other parameters than the model's own. The model
    must not use batch statistics (no BatchNorm: use GroupNorm); buffers are kept as they are.
    """
    names = [n for n, _ in model.named_parameters()]
    if params is None:
        pdict = {n: p.detach() for n, p in model.named_parameters()}
    else:
        flat = torch.from_numpy(np.asarray(params, dtype=np.float64))
        pdict, pos = {}, 0
        for n, p in model.named_parameters():
            pdict[n] = flat[pos:pos + p.numel()].view_as(p).to(dtype=p.dtype, device=p.device)
            pos += p.numel()
    buffers = dict(model.named_buffers())

    def one(pd, xb, yb):
        out = functional_call(model, (pd, buffers), (xb.unsqueeze(0),))
        return loss_fn(out, yb.unsqueeze(0))

    if len(x) == 0:
        return np.zeros((0, sum(p.numel() for p in model.parameters())))
    g = vmap(grad(one), in_dims=(None, 0, 0))(pdict, x, y)
    return torch.cat([g[n].reshape(len(x), -1) for n in names], dim=1).double().cpu().numpy()


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
        self.q = min(o.q for o in self.oracles)
        self.n = len(shards)
        self.d = self.oracles[0].d

    def per_sample_grads(self, i: int, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.oracles[i].per_sample_grads(x, idx)
