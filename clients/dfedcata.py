"""Clients of DFedCata and the decentralized / SAM baselines.

:class:`DecentralizedClient` runs :func:`flwr_strategies.dfedcata.local.local_update` from the
weights it receives (its own start point, sent by the peer-emulating strategy):

- DFedCata: Moreau-envelope SGD with ``lam`` (read from ``config["lam"]``, sent by the
  strategy; anchor = received weights = the extrapolated point);
- DFedAvg: ``lam = 0``; DFedAvgM: heavy-ball ``local_momentum`` (reset every round);
- DFedSAM / FedSAM: SAM radius ``rho``; D-PSGD: exactly ``steps_per_round`` (1) SGD steps.

Weight decay and gradient clipping come from the experiment's ``TrainConfig``
(``weight_decay``, ``grad_clip``; the DFedCata reference code uses 5e-4 and 10). Nothing
persists between rounds on the client.
"""

from __future__ import annotations

from typing import Any

import torch
from flwr.common import Scalar

from flwr_strategies.clients.base import TorchClient, train_settings
from flwr_strategies.dfedcata.local import local_update

__all__ = ["DecentralizedClient"]


class DecentralizedClient(TorchClient):
    """Local rule of the decentralized methods (see module docstring).

    Parameters (``params``)
    -----------------------
    lam : float (default 0.0)
        Moreau-envelope penalty when ``config`` has no ``"lam"``; >= 0.
    local_momentum : float (default 0.0)
        Heavy-ball coefficient of DFedAvgM's local SGD, in [0, 1).
    rho : float (default 0.0)
        SAM perturbation radius (DFedSAM, FedSAM: 0.1); >= 0.
    steps_per_round : int (default 0)
        If > 0, run exactly this many minibatch steps (D-PSGD: 1), overriding epochs/steps.
    """

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        s = train_settings(config, self.setup.train)
        steps, epochs = s["steps"], s["epochs"]
        forced = int(self.params.get("steps_per_round", 0) or 0)
        if forced > 0:
            steps, epochs = forced, None
        elif steps:
            epochs = None
        data = self.setup.train_data
        out: dict[str, Any] = local_update(
            self.model,
            data.x,
            data.y,
            lr=s["lr"],
            batch_size=s["batch_size"],
            generator=generator,
            epochs=epochs,
            steps=steps,
            lam=float(config.get("lam", self.params.get("lam", 0.0))),
            momentum=float(self.params.get("local_momentum", 0.0)),
            rho=float(self.params.get("rho", 0.0)),
            weight_decay=s["weight_decay"],
            clip_norm=s["grad_clip"],
            augment=getattr(data, "augment", None),
        )
        return {"train_loss": float(out["train_loss"]), "steps": int(out["steps"])}
