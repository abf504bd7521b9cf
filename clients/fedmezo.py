"""FedMeZO client (MeZO steps on LoRA adapters) and the backprop LoRA FedAvg baseline client.

Paper: Ling et al., "On the Convergence of Zeroth-Order Federated Tuning for Large Language
Models", KDD 2024. Both clients exchange only the LoRA tensors (trainable parameters, canonical
``named_parameters`` order), run H local steps of batch B over a deterministic, stateless data
cursor, and report ``num_examples = H * B``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from flwr.common import Scalar

from flwr_strategies.fedmezo.engine import MeZOEngine
from flwr_strategies.fedmezo.local import cursor_indices, mezo_local_train
from flwr_strategies.fedmezo.replay import encode_pairs
from flwr_strategies.setup import ClientSetup
from flwr_strategies.simulations.lm.data import collate
from flwr_strategies.simulations.lm.task import evaluate_lm

from .base import TorchClient


class _LoRAClient(TorchClient):
    def __init__(self, setup: ClientSetup, params: dict[str, Any] | None = None) -> None:
        super().__init__(setup, params)
        self.named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        if not self.named:
            raise ValueError("client model has no trainable (LoRA) parameters")
        self.pad_id = int(self.params.get("pad_id", getattr(getattr(self.model, "config", None), "pad_token_id", 0) or 0))
        if len(self.setup.train_data) == 0:
            raise ValueError(f"client {self.partition_id} has an empty training set")

    def get_parameters(self, config: dict[str, Scalar]) -> list[np.ndarray]:
        return [p.detach().cpu().numpy().copy() for _, p in self.named]

    @torch.no_grad()
    def load_lora(self, arrays: list[np.ndarray]) -> None:
        if len(arrays) != len(self.named):
            raise ValueError(f"expected {len(self.named)} LoRA arrays, got {len(arrays)}")
        for (n, p), a in zip(self.named, arrays):
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"LoRA tensor {n}: shape {a.shape} != {tuple(p.shape)}")
            p.copy_(torch.as_tensor(a, dtype=p.dtype))

    def loss_on(self, idx) -> torch.Tensor:
        b = collate(self.setup.train_data, idx, self.pad_id)
        dev = self.setup.device
        return self.model(**{k: v.to(dev) for k, v in b.items()}).loss

    def evaluate(self, parameters, config):
        self.load_lora(parameters)
        data = self.setup.test_data if self.setup.test_data is not None else self.setup.train_data
        loss, m = evaluate_lm(self.model, data, self.pad_id)
        return float(loss), len(data), {**self.base_metrics(), **m}


class FedMeZOClient(_LoRAClient):
    """H MeZO steps on the LoRA adapters at the server-sent learning rate ``lr``.

    Config keys read: ``server_round``, ``lr``, ``mu``, ``local_steps``, ``batch_size``,
    ``weight_decay``, ``num_perturbations``, ``run_seed``, ``restore_mode``, ``z_device``,
    ``comm_mode`` (``params``: upload the LoRA tensors; ``seeds``: upload only the (seed, coef)
    pairs as the bytes metric ``zo_pairs``, 16 bytes per step).
    """

    def fit(self, parameters, config):
        self.load_lora(parameters)
        engine = MeZOEngine(self.named, mu=float(config.get("mu", 1e-3)),
                            restore_mode=str(config.get("restore_mode", "snapshot")),
                            z_device=str(config.get("z_device", "cpu")),
                            weight_decay=float(config.get("weight_decay", 0.0)),
                            num_perturbations=int(config.get("num_perturbations", 1)), module=self.model)
        H = int(config.get("local_steps") or 30)
        B = int(config.get("batch_size") or 1)
        lr = float(config["lr"])
        out = mezo_local_train(engine, self.loss_on, len(self.setup.train_data), lr=lr, steps=H, batch_size=B,
                               run_seed=int(config.get("run_seed", self.setup.seed)),
                               server_round=int(config.get("server_round", 1)), partition_id=self.partition_id)
        pairs = out.pop("pairs")
        metrics: dict[str, Scalar] = {**self.base_metrics(), **out, "lr_used": lr}
        if str(config.get("comm_mode", "params")) == "seeds":
            metrics["zo_pairs"] = encode_pairs(pairs)
            return [], H * B, metrics
        return self.get_parameters({}), H * B, metrics


class LoRAFedAvgClient(_LoRAClient):
    """Backprop baseline: H plain SGD steps (no momentum) on the LoRA adapters, same data cursor."""

    def fit(self, parameters, config):
        self.load_lora(parameters)
        H = int(config.get("local_steps") or 30)
        B = int(config.get("batch_size") or 1)
        lr = float(config["lr"])
        seed = int(config.get("run_seed", self.setup.seed))
        rnd = int(config.get("server_round", 1))
        self.model.train()
        losses = []
        params = [p for _, p in self.named]
        for k in range(H):
            idx = cursor_indices(len(self.setup.train_data), ((rnd - 1) * H + k) * B, B, seed, self.partition_id)
            loss = self.loss_on(idx)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.add_(g, alpha=-lr)
            losses.append(float(loss.detach()))
        self.model.eval()
        metrics = {**self.base_metrics(), "train_loss": float(np.mean(losses)), "lr_used": lr, "n_skipped": 0}
        return self.get_parameters({}), H * B, metrics
