"""FedMUD's client pieces for your own training loop, and the ready-made client built on them.

Li et al., "The Panaceas for Improving Low-Rank Decomposition in Communication-Efficient Federated
Learning", ICML 2025. Also serves FedLMT, FedPara and FedHM (same wire format).

:class:`FedMUDRound` turns one training message into your own ``nn.Module`` in its decomposed form
(``W_base + dW(factors)`` on every compressed layer, via ``torch.nn.utils.parametrize``), keeping
``W_base`` in ``context.state`` between rounds. Train it with your own loop, then send
:meth:`FedMUDRound.finish`'s arrays. Everything the client needs (variant, ratio, seeds, push flag)
comes from the server's message, so there is nothing to configure on the client. Message API::

    @app.train()
    def train(msg, context):
        model = Net()
        mud = FedMUDRound.from_message(model, msg, context)   # instead of model.load_state_dict(...)
        train_fn(model, trainloader, epochs, lr, device)       # your loop, unchanged
        return mud.reply(msg, context, len(trainloader.dataset))

Legacy ``NumPyClient.fit``::

    mud = FedMUDRound(self.net, parameters, config, self.context.state)
    train_fn(self.net, self.trainloader, epochs, lr, device)
    return mud.finish(), len(self.trainloader.dataset), {}

An optimizer built over ``model.parameters()`` **after** the wrapping works: the frozen ``W_base``
and frozen factors have ``requires_grad=False`` and get no gradient. While the round is open, the
piece checks every ``torch.optim`` step on the model: an optimizer that holds none of the factors
(built before the wrapping) is refused at its first step, and factors that become non-finite stop
the round at that step with the settings that caused it. After :meth:`FedMUDRound.finish` the model
is plain again and holds the trained effective weights.

**Learning rate.** Your optimizer trains the factors, not the weights, and with the paper's random
factors a learning rate tuned for FedAvg diverges (:mod:`flwr_strategies.fedmud.delta` gives the
gain). Build the strategy with ``init_scale="auto"`` (and ``base_init="given"`` for FedMUD, so the
compressed layers start from your model's own weights) and your learning rate keeps its meaning.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from torch import nn
from flwr_strategies.core.local import watch_steps
from flwr_strategies.fedmud.protocol import MUDClientCore
from flwr_strategies.setup import ClientSetup

from .app import message_config, train_reply
from .base import TorchClient

__all__ = ["FedMUDRound", "FedMUDClient", "STATE_BASE", "STATE_META"]

#: ``context.state`` keys holding this client's ``W_base`` (ArrayRecord) and its merge count (ConfigRecord).
STATE_BASE = "fedmud.base"
STATE_META = "fedmud.meta"


def _arrays(arrays: Any) -> list[np.ndarray]:
    if isinstance(arrays, ArrayRecord):
        return arrays.to_numpy_ndarrays()
    return [np.asarray(a) for a in arrays]


def _load(state: Any) -> tuple[list[np.ndarray], int] | None:
    if state is None or STATE_BASE not in state:
        return None
    return _arrays(state[STATE_BASE]), int(state[STATE_META]["merges"])


def _save(state: Any, stored: tuple[list[np.ndarray], int] | None) -> None:
    if state is None or stored is None:
        return
    base, merges = stored
    if isinstance(state, Mapping) and not hasattr(state, "array_records"):  # a plain dict
        state[STATE_BASE], state[STATE_META] = [a.copy() for a in base], {"merges": int(merges)}
        return
    state[STATE_BASE] = ArrayRecord([np.ascontiguousarray(a) for a in base])
    state[STATE_META] = ConfigRecord({"merges": int(merges)})


def _settings(optimizer: torch.optim.Optimizer) -> str:
    group = optimizer.param_groups[0]
    keys = [k for k in ("lr", "momentum", "betas", "weight_decay") if k in group]
    return f"{type(optimizer).__name__}(" + ", ".join(f"{k}={group[k]!r}" for k in keys) + ")"


#: FedLMT (weights ``W = U V``, both factors trained, factors averaged directly): the largest SGD step
#: ``lr / (1 - momentum)`` measured to learn on Flower's quickstart-pytorch CNN (4 nodes, 4 rounds of
#: 3 epochs, ``init_scale="auto"``): momentum 0.9 learns at lr 0.02 and 0.03 (0.92), and at lr 0.05
#: learns for two rounds, then collapses to chance; plain SGD learns at lr 0.1 (0.81).
FEDLMT_MAX_SGD_STEP = 0.3


class _StepWatch:
    """Checks every optimizer step on the wrapped model while a round is open (global torch.optim
    step hooks, removed when the round closes)."""

    def __init__(self, round_: "FedMUDRound") -> None:
        self.round = weakref.proxy(round_)
        model = round_.model
        self.mine = {id(p) for p in model.parameters()}
        self.factors = [p for _, deco in round_.core.dm.decompositions() for p in deco.parameters() if p.requires_grad]
        self.factor_ids = {id(p) for p in self.factors}
        self.steps = 0
        self.checked: set[int] = set()
        cfg = round_.core.config
        self.fedlmt = cfg.zero_base and cfg.random_right and cfg.decomp == "mat" and not cfg.fedhm
        self.watch = watch_steps(self, before="before", after="after")  # until close(), or collection

    def _held(self, optimizer) -> set[int]:
        return {id(p) for group in optimizer.param_groups for p in group["params"]}

    def before(self, optimizer) -> None:
        if id(optimizer) in self.checked:
            return
        held = self._held(optimizer)
        if not held & self.mine:
            return
        self.checked.add(id(optimizer))
        if self.factor_ids and not held & self.factor_ids:
            raise RuntimeError(
                f"FedMUD: {_settings(optimizer)} holds parameters of the wrapped model but none of its trainable "
                "factors, so the compressed layers would not train: build the optimizer after "
                "FedMUDRound(...) / FedMUDRound.from_message(...) wrapped the model (e.g. inside your train function)")
        if not (self.fedlmt and isinstance(optimizer, torch.optim.SGD)):
            return
        group = optimizer.param_groups[0]  # SGD's step on a constant gradient: lr / (1 - momentum)
        step = float(group["lr"]) / (1.0 - float(group.get("momentum", 0.0) or 0.0))
        if step > FEDLMT_MAX_SGD_STEP * (1 + 1e-9):  # float slack: 0.03/(1-0.9)
            raise ValueError(
                f"FedLMT refuses {_settings(optimizer)}: its SGD step lr / (1 - momentum) = {step:.3g} exceeds "
                f"{FEDLMT_MAX_SGD_STEP}. FedLMT trains the weights as products W = U V of factors that are averaged "
                "directly, and its step grows with the factors: on Flower's quickstart CNN, momentum 0.9 learned at "
                "lr 0.02-0.03 and collapsed to chance after two rounds at lr 0.05 (plain SGD: lr 0.1 learned). Use "
                f"lr <= {FEDLMT_MAX_SGD_STEP * 0.1:.2g} with momentum 0.9, lr <= 0.1 without, or FedMUD, whose "
                "update starts from your model and learns at the learning rates FedAvg does.")

    def after(self, optimizer) -> None:
        held = self._held(optimizer)
        if not held & self.factor_ids:
            return
        self.steps += 1
        if all(bool(torch.isfinite(p).all()) for p in self.factors if id(p) in held):
            return
        scale = self.round.core.config.scale
        hint = ("" if scale == "auto" else
                f" With init_scale={scale!r} the factors' random partners scale every step of your optimizer "
                "(for FedMUD's BKD at a=5 about 17x further than on the plain model in expectation, x10 with "
                "momentum 0.9); build the strategy with init_scale='auto' so that your learning rate keeps its "
                "meaning on the decomposed model, or lower the learning rate.")
        raise FloatingPointError(
            f"FedMUD: the trainable factors became non-finite at local step {self.steps} under "
            f"{_settings(optimizer)}.{hint}")

    def close(self) -> None:
        self.watch.remove()


class FedMUDRound:
    """One FedMUD round on your own model: wrap it, train it with your loop, send :meth:`finish`.

    Wraps ``model`` **in place**: every compressed layer's ``weight`` becomes
    ``W_base + dW(factors)`` (a ``torch.nn.utils.parametrize`` parametrisation); ``W_base`` and the
    frozen factors do not require gradients, the trainable factors and every uncompressed parameter
    do. The received arrays, the merge/reset the server asks for and this client's stored ``W_base``
    are applied before it returns, and the new ``W_base`` is written back to ``state``.

    Parameters
    ----------
    model : torch.nn.Module
        Your plain model (same class as the server's ``model``); its current weights are ignored.
    arrays : list[np.ndarray] | ArrayRecord
        The arrays of the training message (legacy ``parameters``, or ``msg.content["arrays"]``).
    config : Mapping
        The training config (legacy ``config``, or ``msg.content["config"]``); must come from a
        FedMUD / FedLMT / FedPara / FedHM strategy (it carries the settings and seeds).
    state : RecordDict | dict | None
        Where this client keeps its ``W_base`` between rounds: Flower's ``context.state`` (default
        place), or any dict. None keeps nothing (only for FedLMT / FedPara / FedHM, whose base is 0,
        or a client that is always sent the full base).
    """

    def __init__(self, model: nn.Module, arrays: Any, config: Mapping[str, Any], state: Any = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        stale = getattr(model, "_fedmud_round", None)
        if stale is not None:  # a previous round that was not finished (e.g. training raised)
            stale._close()
        config = dict(config)
        self.model = model
        self.core = MUDClientCore.from_message_config(model, config, copy_model=False)
        self._finished = False
        self._watch: _StepWatch | None = None
        model._fedmud_round = self
        try:
            if state is None and not self.core.config.zero_base:
                raise ValueError("FedMUD keeps W_base between rounds: pass context.state (or a dict) as state")
            stored = self.core.receive(_arrays(arrays), config, _load(state))
        except Exception:
            self._close()
            raise
        _save(state, stored)
        self._watch = _StepWatch(self)

    def _close(self) -> None:
        """Unwrap the model and stop watching its optimizer steps."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self.core.dm.unwrap()
        self.model._fedmud_round = None

    @classmethod
    def from_message(cls, model: nn.Module, msg: Message, context: Context, *, arrays_key: str = "arrays",
                     config_key: str = "config") -> "FedMUDRound":
        """Message API: ``FedMUDRound(model, msg.content["arrays"], msg.content["config"], context.state)``."""
        return cls(model, msg.content[arrays_key], message_config(msg, config_key), context.state)

    @property
    def config(self):
        """The server's :class:`~flwr_strategies.fedmud.config.FedMUDConfig`."""
        return self.core.config

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters that train this round (factors and uncompressed layers)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def arrays(self) -> list[np.ndarray]:
        """The arrays to send now: trained factors and uncompressed arrays, in the server's order."""
        if self._finished:
            raise RuntimeError("this round is finished; its arrays were returned by finish()")
        return self.core.payload()

    def finish(self, unwrap: bool = True) -> list[np.ndarray]:
        """The arrays to send back; with ``unwrap`` (default) the model becomes plain again, holding
        the trained effective weights ``W_base + dW`` (same ``state_dict`` keys and order as before)."""
        out = self.arrays()
        if unwrap:
            self._close()
            self._finished = True
        return out

    def reply(self, msg: Message, context: Context, num_examples: int, metrics: dict[str, Any] | None = None) -> Message:
        """Message API: the train reply (``arrays`` = :meth:`finish`, ``num-examples``, ``partition-id``)."""
        return train_reply(msg, context, self.finish(), int(num_examples), metrics)


class FedMUDClient(TorchClient):
    """Ready-made FedMUD client (also FedLMT / FedPara / FedHM): :class:`FedMUDRound` around plain
    local SGD with the round's ``lr``, epochs or steps, batch size, momentum, weight decay and
    gradient clipping.

    ``setup.train_data`` is in-memory :class:`~flwr_strategies.clients.training.TensorData` (batched
    with this client's seeded generator) or any iterable of ``(x, y)`` batches such as a DataLoader
    (its own batching and shuffling apply; ``batch_size`` is then the loader's); the local run is
    :class:`~flwr_strategies.clients.base.TorchClient`'s (plain SGD on the one local loop) on the
    wrapped model. ``W_base`` is kept in ``setup.state`` (``context.state``). Evaluation messages
    carry the plain global model and are scored as by ``TorchClient``.
    """

    def __init__(self, setup: ClientSetup, params: dict[str, Any] | None = None) -> None:
        super().__init__(setup, params)
        self._local_state: dict[str, Any] = {}

    def fit(self, parameters: list[np.ndarray], config: dict[str, Any]):
        state = self.setup.state if self.setup.state is not None else self._local_state
        mud = FedMUDRound(self.model, parameters, config, state)
        try:
            metrics = self.local_train(config, self.generator(config))
        finally:
            arrays = mud.finish()
        return arrays, self.num_train(), {**self.base_metrics(), **metrics}
