"""Client side of FedLi-LS, FedLi-LU, FedExP and SCAFFOLD: pieces for your own loop, ready-made clients.

Paper: Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning";
FedExP: Jhunjhunwala et al., ICLR 2023; SCAFFOLD: Karimireddy et al., ICML 2020.

Pieces (torch-native; your ``nn.Module``, your batches, your loop):

- :class:`ArmijoSGD` (FedLi-LS): the stochastic Armijo line search as a ``torch.optim.Optimizer``
  with ``step(closure)``; the closure computes the loss from whatever your batch holds::

      opt = ArmijoSGD(net.parameters(), ArmijoConfig.from_mapping(config), batch_fraction=1 / len(loader))
      for x, y in loader:
          opt.step(lambda: criterion(net(x), y))
      metrics["step_size"] = opt.summary()["step_size"]       # the scalar the FedLi-LS server needs

- FedLi-LU and FedExP need no piece: plain SGD (FedLi-LU clients report ``train_loss``).
- :class:`ScaffoldSession` (SCAFFOLD): loads ``w_t`` and the controls from the message, keeps
  ``c_i`` in ``context.state`` and builds the :class:`ScaffoldCorrection` to call after
  ``backward()``::

      session = ScaffoldSession(net, msg.content["arrays"].to_numpy_ndarrays(), context.state)
      ...  loss.backward(); session.correction.apply(); optimizer.step()
      reply_arrays = session.finish(lr)                      # w_i ++ dc_i; c_i+ saved in context.state

Ready-made ``NumPyClient``s built on them (registry factories below): :class:`ArmijoSGDClient`
(``fedli-ls``), :class:`LossReportingSGDClient` (``fedli-lu``), :class:`SGDClient` (``fedexp``),
:class:`ScaffoldClient` (``scaffold``). Their ``ClientSetup.train_data`` may be the project's
in-memory :class:`~flwr_strategies.clients.training.TensorData` (seeded shuffling) or any iterable
of ``(x, y)`` batches such as a ``torch.utils.data.DataLoader`` (its own batching and order; batches
are moved to the model's device).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from flwr.common import ArrayRecord, Scalar

from flwr_strategies.core.local import batch_stream, evaluate
from flwr_strategies.fedli.armijo import ArmijoConfig
from flwr_strategies.fedli.armijo_optim import ArmijoSGD
from flwr_strategies.fedli.armijo_training import armijo_local_train
from flwr_strategies.fedli.scaffold import ScaffoldCorrection

from .base import TorchClient, train_settings
from .training import TensorData, get_weights, local_sgd, set_weights

__all__ = [
    "ArmijoConfig", "ArmijoSGD", "ScaffoldCorrection", "ScaffoldSession",
    "ArmijoSGDClient", "LossReportingSGDClient", "SGDClient", "ScaffoldClient",
    "STATE_KEY",
]

#: ``context.state`` key of a SCAFFOLD client's control variate (an ``ArrayRecord``, state_dict layout).
STATE_KEY = "scaffold_c_i"


# ------------------------------------------------------------------------------ SCAFFOLD session
class ScaffoldSession:
    """One SCAFFOLD client round on your model: wire format in, correction, wire format out.

    Reads the server's message arrays ``w_t ++ c`` (the client keeps ``c_i``) or ``w_t ++ c ++ c_i``
    (``control_state="server"``), loads ``w_t`` into ``model`` (``state_dict`` order) and builds
    :attr:`correction` (a :class:`ScaffoldCorrection` over the trainable parameters). After your
    local loop, :meth:`finish` computes option II's ``c_i+``, stores it in ``state`` (unless the
    server holds it) and returns the reply arrays ``w_i ++ dc_i``.

    Parameters
    ----------
    model : torch.nn.Module
        Your model (its ``state_dict`` layout is the wire layout).
    arrays : list[np.ndarray]
        The message's arrays.
    state : flwr RecordDict | None
        ``context.state`` (needed unless the server sends ``c_i``).
    """

    def __init__(self, model: torch.nn.Module, arrays: list[np.ndarray], state: Any = None) -> None:
        self.model = model
        self.keys = list(model.state_dict().keys())
        n = len(self.keys)
        if len(arrays) not in (2 * n, 3 * n):
            raise ValueError(f"SCAFFOLD client expects {2 * n} (weights ++ control) or {3 * n} arrays "
                             f"(++ own control), got {len(arrays)}")
        self.server_held = len(arrays) == 3 * n
        self.state = state
        w_t = [np.asarray(a) for a in arrays[:n]]
        c_glob = [np.asarray(a) for a in arrays[n: 2 * n]]
        if self.server_held:
            c_i = [np.asarray(a) for a in arrays[2 * n:]]
        else:
            if state is None:
                raise RuntimeError("SCAFFOLD client needs context.state to keep its control variate across rounds")
            c_i = state[STATE_KEY].to_numpy_ndarrays() if STATE_KEY in state else [np.zeros_like(a) for a in w_t]
            if len(c_i) != n:
                raise ValueError(f"context.state['{STATE_KEY}'] holds {len(c_i)} arrays, the model has {n}")
        self.c_local = c_i
        set_weights(model, w_t)
        self.param_names = [name for name, _ in model.named_parameters()]
        pos = {k: j for j, k in enumerate(self.keys)}
        self._pos = [pos[name] for name in self.param_names]
        self.correction = ScaffoldCorrection(model, [c_glob[j] for j in self._pos], [c_i[j] for j in self._pos])

    def finish(self, lr: float, steps: int | None = None) -> list[np.ndarray]:
        """``w_i ++ dc_i`` (``state_dict`` layout; controls of buffers stay 0); saves ``c_i+``."""
        c_new_p, dc_p = self.correction.control_update(lr, steps)
        c_new = [np.zeros_like(a) for a in self.c_local]
        dc = [np.zeros_like(a) for a in self.c_local]
        for j, cn, d in zip(self._pos, c_new_p, dc_p):
            c_new[j], dc[j] = cn, d
        if not self.server_held:
            self.state[STATE_KEY] = ArrayRecord(c_new)
        return get_weights(self.model) + dc


# ------------------------------------------------------------------------------ ready-made clients
class SGDClient(TorchClient):
    """Plain local SGD (FedExP's client): honours ``lr`` (per round, so ``lr_decay`` too),
    ``local_epochs`` / ``local_steps``, ``batch_size`` (``TensorData``), ``weight_decay``,
    ``momentum`` and ``grad_clip``. Metrics: ``train_loss``, ``steps``."""


class LossReportingSGDClient(SGDClient):
    """FedLi-LU client: :class:`SGDClient` that reports the loss the server's DFW step needs.

    ``loss_report`` (fit config, else ``params``, default ``"epoch_mean"``): the mean minibatch loss
    of the local epoch, ``"initial"`` (loss of the received model on the local training set) or
    ``"final"`` (loss of the trained model on the local training set). Metrics: ``train_loss`` (the
    chosen value), ``epoch_mean_loss``, ``steps``.
    """

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        mode = str(config.get("loss_report", self.params.get("loss_report", "epoch_mean")))
        if mode not in ("epoch_mean", "initial", "final"):
            raise ValueError(f"loss_report must be epoch_mean, initial or final, got {mode!r}")
        data, device = self.setup.train_data, self.setup.device
        initial = evaluate(self.model, data, device=device)[0] if mode == "initial" else None
        stats = super().local_train(config, generator)
        value = {"epoch_mean": stats["train_loss"], "initial": initial}.get(mode)
        if mode == "final":
            value = evaluate(self.model, data, device=device)[0]
        return {"train_loss": float(value), "epoch_mean_loss": float(stats["train_loss"]), "steps": int(stats["steps"])}


class ArmijoSGDClient(TorchClient):
    """FedLi-LS client: local SGD with the stochastic Armijo line search (:class:`ArmijoSGD`).

    The Armijo constants are read from the fit config (sent by the FedLi-LS server), falling back
    to ``params``. ``lr`` is not used: the line search replaces it (``eta_max`` bounds the step).
    ``weight_decay``, ``momentum`` and ``grad_clip`` are rejected with an error (they would break the
    sufficient-decrease test). Metrics: ``step_size`` (last accepted step), ``train_loss`` (mean
    minibatch loss before each step), ``n_backtracks``, ``n_fallback``, ``steps``.
    """

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        cfg = ArmijoConfig.from_mapping({**self.params, **config})
        s = train_settings(config, self.setup.train)
        for name, bad in (("weight_decay", s["weight_decay"] != 0), ("momentum", s["momentum"] != 0),
                          ("grad_clip", s["grad_clip"] is not None)):
            if bad:
                raise ValueError(f"the FedLi-LS (Armijo) client does not support {name}={s[name]!r}")
        data = self.setup.train_data
        if isinstance(data, TensorData):
            fraction = int(s["batch_size"]) / self.num_train()
        else:  # 1 / batches per epoch of the user's loader
            fraction = 1.0 / max(1, len(data) if hasattr(data, "__len__") else sum(1 for _ in data))
        batches = batch_stream(data, epochs=s["epochs"], steps=s["steps"], batch_size=s["batch_size"],
                               generator=generator, device=self.setup.device)
        return armijo_local_train(self.model, batches, cfg, generator, batch_fraction=fraction)


class ScaffoldClient(TorchClient):
    """SCAFFOLD (option II) client on :class:`ScaffoldSession`; ``c_i`` persists in ``context.state``.

    Receives ``w_t ++ c`` (or ``w_t ++ c ++ c_i`` when the server keeps the controls) and replies
    ``w_i ++ dc_i``. Local SGD honours ``lr``, epochs/steps, ``batch_size``, ``weight_decay``,
    ``momentum`` and ``grad_clip``; the correction is added after clipping, or before it when the
    server sends ``scaffold_correction_in_clip`` (the official code). Raises ``RuntimeError`` if the
    runtime gives no ``context.state``.
    """

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        session = ScaffoldSession(self.model, parameters, self.setup.state)
        s = train_settings(config, self.setup.train)
        in_clip = bool(config.get("scaffold_correction_in_clip", self.params.get("correction_in_clip", False)))
        apply = session.correction.apply
        stats = local_sgd(self.model, self.setup.train_data, generator=self.generator(config), device=self.setup.device,
                          before_clip=apply if in_clip else None, before_step=None if in_clip else apply,
                          check_finite="SCAFFOLD client", **s)
        return session.finish(s["lr"], int(stats["steps"])), self.num_train(), {**self.base_metrics(), **stats}
