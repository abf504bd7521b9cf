"""Client side of FedLi-LS, FedLi-LU, FedExP and SCAFFOLD: pieces for your own loop, ready-made clients.

Paper: Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning" (spec 001);
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

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from flwr.common import ArrayRecord, Scalar

from flwr_strategies.fedli import ArmijoConfig, ArmijoSGD, ScaffoldCorrection, armijo_local_train

from .base import TorchClient, train_settings
from .training import TensorData, batch_stream, evaluate_model, get_weights, set_weights, take_batch

__all__ = [
    "ArmijoConfig", "ArmijoSGD", "ScaffoldCorrection", "ScaffoldSession",
    "ArmijoSGDClient", "LossReportingSGDClient", "SGDClient", "ScaffoldClient",
    "build_armijo_client", "build_loss_client", "build_sgd_client", "build_scaffold_client",
    "count_examples", "local_batches", "evaluate_batches", "STATE_KEY",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: ``context.state`` key of a SCAFFOLD client's control variate (an ``ArrayRecord``, state_dict layout).
STATE_KEY = "scaffold_c_i"


# ------------------------------------------------------------------------------ data, any format
def _device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _to(batch: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(f"expected (inputs, labels) batches, got {type(batch).__name__}")
    x, y = batch
    return x.to(device), y.to(device)


def count_examples(data: Any) -> int:
    """Number of examples in ``data``: ``len`` of a ``TensorData``, of a DataLoader's sampler or
    dataset, else the labels counted over one pass."""
    if isinstance(data, TensorData):
        return len(data)
    sampler = getattr(data, "sampler", None)
    if sampler is not None and hasattr(sampler, "__len__") and getattr(data, "batch_sampler", None) is not None:
        return len(sampler)
    dataset = getattr(data, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        return len(dataset)
    return int(sum(len(batch[1]) for batch in data))


def _batches_per_epoch(data: Any, batch_size: int) -> int:
    if isinstance(data, TensorData):
        return max(1, math.ceil(len(data) / batch_size))
    if hasattr(data, "__len__"):
        return max(1, len(data))
    return max(1, sum(1 for _ in data))


def local_batches(data: Any, settings: dict[str, Any], generator: torch.Generator,
                  device: torch.device | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The round's minibatches: ``settings["steps"]`` batches or ``settings["epochs"]`` passes.

    ``TensorData``: shuffled with ``generator`` in ``settings["batch_size"]`` rows (as every client
    of the project). Any other iterable of ``(x, y)`` (a DataLoader): its own batches and order,
    re-iterated for each pass, moved to ``device``.
    """
    steps, epochs = settings.get("steps"), settings.get("epochs")
    if isinstance(data, TensorData):
        for idx in batch_stream(len(data), int(settings["batch_size"]), generator, epochs=epochs, steps=steps):
            yield take_batch(data, idx, generator)
        return
    device = device or torch.device("cpu")
    if steps:
        done = 0
        while done < steps:
            empty = True
            for batch in data:
                empty = False
                yield _to(batch, device)
                done += 1
                if done == steps:
                    return
            if empty:
                raise ValueError("cannot train on an empty dataset")
    else:
        for _ in range(int(epochs or 1)):
            yield from (_to(batch, device) for batch in data)


@torch.no_grad()
def evaluate_batches(model: torch.nn.Module, data: Any, loss_fn: LossFn = F.cross_entropy) -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` on ``data`` (``TensorData`` or ``(x, y)`` batches)."""
    if isinstance(data, TensorData):
        return evaluate_model(model, data, loss_fn=loss_fn)
    model.eval()
    device = _device(model)
    loss_sum, correct, n = 0.0, 0, 0
    for batch in data:
        x, y = _to(batch, device)
        out = model(x)
        loss_sum += float(loss_fn(out, y, reduction="sum"))
        correct += int((out.argmax(dim=1) == y).sum())
        n += int(len(y))
    if n == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    return loss_sum / n, correct / n


def sgd_steps(model: torch.nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *, lr: float,
              momentum: float = 0.0, weight_decay: float = 0.0, grad_clip: float | None = None,
              before_clip: Callable[[], None] | None = None, before_step: Callable[[], None] | None = None,
              loss_fn: LossFn = F.cross_entropy) -> dict[str, float | int]:
    """Minibatch ``torch.optim.SGD`` over ``batches`` with optional clipping (the arithmetic of
    :func:`~flwr_strategies.clients.training.local_sgd`); ``before_clip`` / ``before_step`` run after
    each ``backward()`` (e.g. :meth:`ScaffoldCorrection.apply`). Returns mean loss and step count."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    total, count = 0.0, 0
    for xb, yb in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        if before_clip is not None:
            before_clip()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        if before_step is not None:
            before_step()
        opt.step()
        total += float(loss.detach())
        count += 1
    return {"train_loss": total / max(count, 1), "steps": count}


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
class _FedLiClient(TorchClient):
    """:class:`TorchClient` whose data may be ``TensorData`` or any iterable of ``(x, y)`` batches."""

    def num_train(self) -> int:
        return count_examples(self.setup.train_data)

    def batches(self, settings: dict[str, Any], generator: torch.Generator):
        return local_batches(self.setup.train_data, settings, generator, _device(self.model))

    def evaluate(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        set_weights(self.model, parameters)
        data = self.setup.test_data if self.setup.test_data is not None else self.setup.train_data
        loss, acc = evaluate_batches(self.model, data)
        return float(loss), count_examples(data), {**self.base_metrics(), "accuracy": float(acc)}


class SGDClient(_FedLiClient):
    """Plain local SGD (FedExP's client): honours ``lr`` (per round, so ``lr_decay`` too),
    ``local_epochs`` / ``local_steps``, ``batch_size`` (``TensorData``), ``weight_decay``,
    ``momentum`` and ``grad_clip``. Metrics: ``train_loss``, ``steps``."""

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        s = train_settings(config, self.setup.train)
        return sgd_steps(self.model, self.batches(s, generator), lr=s["lr"], momentum=s["momentum"],
                         weight_decay=s["weight_decay"], grad_clip=s["grad_clip"])


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
        initial = evaluate_batches(self.model, self.setup.train_data)[0] if mode == "initial" else None
        stats = super().local_train(config, generator)
        value = {"epoch_mean": stats["train_loss"], "initial": initial}.get(mode)
        if mode == "final":
            value = evaluate_batches(self.model, self.setup.train_data)[0]
        return {"train_loss": float(value), "epoch_mean_loss": float(stats["train_loss"]), "steps": int(stats["steps"])}


class ArmijoSGDClient(_FedLiClient):
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
        fraction = 1.0 / _batches_per_epoch(data, int(s["batch_size"])) if not isinstance(data, TensorData) \
            else int(s["batch_size"]) / self.num_train()
        return armijo_local_train(self.model, self.batches(s, generator), cfg, generator, batch_fraction=fraction)


class ScaffoldClient(_FedLiClient):
    """SCAFFOLD (option II) client on :class:`ScaffoldSession`; ``c_i`` persists in ``context.state``.

    Receives ``w_t ++ c`` (or ``w_t ++ c ++ c_i`` when the server keeps the controls) and replies
    ``w_i ++ dc_i``. Local SGD honours ``lr``, epochs/steps, ``batch_size``, ``weight_decay``,
    ``momentum`` and ``grad_clip``; the correction is added after clipping, or before it when the
    server sends ``scaffold_correction_in_clip`` (the official code). Raises ``RuntimeError`` if the
    runtime gives no ``context.state``.
    """

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        session = ScaffoldSession(self.model, parameters, self.setup.state)
        generator = self.generator(config)
        s = train_settings(config, self.setup.train)
        in_clip = bool(config.get("scaffold_correction_in_clip", self.params.get("correction_in_clip", False)))
        apply = session.correction.apply
        stats = sgd_steps(self.model, self.batches(s, generator), lr=s["lr"], momentum=s["momentum"],
                          weight_decay=s["weight_decay"], grad_clip=s["grad_clip"],
                          before_clip=apply if in_clip else None, before_step=None if in_clip else apply)
        if not math.isfinite(float(stats["train_loss"])):
            raise FloatingPointError("SCAFFOLD client: non-finite training loss")
        return session.finish(s["lr"], int(stats["steps"])), self.num_train(), {**self.base_metrics(), **stats}


def build_armijo_client(setup, params) -> ArmijoSGDClient:
    """Registry factory of the ``fedli-ls`` client."""
    return ArmijoSGDClient(setup, params)


def build_loss_client(setup, params) -> LossReportingSGDClient:
    """Registry factory of the ``fedli-lu`` client."""
    return LossReportingSGDClient(setup, params)


def build_sgd_client(setup, params) -> SGDClient:
    """Registry factory of the ``fedexp`` client (plain SGD)."""
    return SGDClient(setup, params)


def build_scaffold_client(setup, params) -> ScaffoldClient:
    """Registry factory of the ``scaffold`` client."""
    return ScaffoldClient(setup, params)
