"""FedProx client: local SGD on the loss plus the proximal term (mu/2)||w - w_global||^2.

Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020. Flower's ``FedProx``
strategy only sends ``proximal_mu`` in the fit config; the client adds the term itself.
"""

from __future__ import annotations

import torch
from flwr.common import Scalar

from .base import TorchClient


class FedProxClient(TorchClient):
    """:class:`TorchClient` whose batch loss adds ``(mu/2) * ||w - w_global||^2``.

    ``mu`` is read from the fit config key ``proximal_mu`` (sent by Flower's ``FedProx``), falling
    back to ``params["proximal_mu"]``. It must be >= 0; 0 gives plain FedAvg local training.
    """

    def extra_loss(self, config: dict[str, Scalar]):
        mu = float(config.get("proximal_mu", self.params.get("proximal_mu", 0.0)))
        if mu < 0:
            raise ValueError(f"proximal_mu must be >= 0, got {mu}")
        if mu == 0:
            return None
        anchor = [p.detach().clone() for p in self.model.parameters()]

        def proximal(model: torch.nn.Module) -> torch.Tensor:
            return (mu / 2.0) * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))

        return proximal
