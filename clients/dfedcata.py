"""Client side of DFedCata and the decentralized / SAM baselines: torch pieces and the ready-made client.

Pieces for your own model and training loop (from :mod:`flwr_strategies.dfedcata.local`):

- :class:`MoreauEnvelope` — DFedCata's proximal term around the received start point. Wrap your
  unchanged ``train()``::

        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        with MoreauEnvelope(model, lam=msg.content["config"]["lam"]):
            train(model, trainloader, epochs, lr, device)

  (or add ``envelope.penalty()`` to your loss);
- :class:`LocalSGD` — the exact local step of every method here as a ``torch.optim.Optimizer``
  (clip, weight decay, proximal term, heavy ball; ``clip_scope`` "data" or "official");
- :class:`SAM` — sharpness-aware steps around any optimizer (DFedSAM, FedSAM): after
  ``loss.backward()``, ``sam.step(closure)`` with a closure that recomputes the loss on the same
  batch and calls ``backward()``;
- :func:`run_local` — the local rule over any iterable of ``(x, y)`` batches, on the one local loop
  (:func:`flwr_strategies.core.local.train_steps`).

:class:`DecentralizedClient` is the ready-made ``NumPyClient`` built on them. It trains on
``ClientSetup.train_data`` given either as in-memory :class:`~flwr_strategies.clients.training.TensorData`
(seeded minibatches of ``batch_size``) or as any re-iterable of ``(x, y)`` batches such as a
``DataLoader`` (its own batch size and order). Every ``TrainConfig`` field is honoured: ``lr`` (with
``lr_decay`` through the round's config), ``local_epochs``/``local_steps``, ``batch_size`` (in-memory
data), ``weight_decay``, ``momentum`` (heavy ball; DFedAvgM's ``local_momentum`` when set, and the
two must agree), ``grad_clip`` (scope ``clip_scope``). Nothing persists between rounds.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from flwr.common import Scalar

from flwr_strategies.adapters.method import hyperparameter_section
from flwr_strategies.clients.base import TorchClient, train_settings
from flwr_strategies.core.local import batch_stream
from flwr_strategies.dfedcata.config import LocalRuleConfig
from flwr_strategies.dfedcata.local import SAM, LocalSGD, MoreauEnvelope, local_update, run_local
from flwr_strategies.setup import ClientSetup

__all__ = [
    "MoreauEnvelope", "LocalSGD", "SAM", "run_local", "local_update",
    "DecentralizedClient",
]


class DecentralizedClient(TorchClient):
    """The local rule of DFedCata, DFedAvg(M), DFedSAM, D-PSGD and FedSAM (see the module docstring).

    It loads the weights it receives (its own start point, sent by the peer-emulating strategy),
    which are also the Moreau-envelope anchor, and runs :func:`run_local`. Its ``params`` are the
    fields of :class:`~flwr_strategies.dfedcata.config.LocalRuleConfig` (below), which validates them.
    """

    #: what ``params`` holds (the docstring's "Hyperparameters" section lists its fields)
    hyperparameters = {"params": LocalRuleConfig}

    def __init__(self, setup: ClientSetup, params: dict[str, Any] | None = None) -> None:
        super().__init__(setup, params)
        self.rule = LocalRuleConfig.from_params(self.params)

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        s = train_settings(config, self.setup.train)
        lam = float(config.get("lam", self.rule.lam))
        # steps_per_round > 0 replaces the epochs/steps setting; batch_stream runs steps when set, else epochs (>= 1)
        batches = batch_stream(self.setup.train_data, epochs=s["epochs"], steps=self.rule.steps_per_round or s["steps"],
                               batch_size=s["batch_size"], generator=generator, device=self.setup.device)
        out = run_local(
            self.model,
            batches,
            lr=s["lr"],
            lam=lam,
            momentum=self.rule.momentum(s["momentum"]),
            rho=self.rule.rho,
            weight_decay=s["weight_decay"],
            clip_norm=s["grad_clip"],
            clip_scope=self.rule.clip_scope,
        )
        return {"train_loss": float(out["train_loss"]), "steps": int(out["steps"])}


DecentralizedClient.__doc__ = inspect.getdoc(DecentralizedClient) + hyperparameter_section(DecentralizedClient)
