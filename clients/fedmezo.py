"""FedMeZO on the client: a MeZO optimizer for your own (peft) model, payload helpers, and the
ready-made clients (FedMeZO and its backprop baseline LoRA FedAvg).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926); MeZO: Malladi et al., NeurIPS 2023.

Pieces for a training loop you already have (the server sends and expects only the trainable
arrays, i.e. the LoRA adapters)::

    from flwr_strategies.clients.fedmezo import MeZO, load_trainable_arrays, trainable_arrays

    load_trainable_arrays(model, arrays)                 # the LoRA tensors the server sent
    opt = MeZO.from_config(model, config, partition_id)  # lr, mu and per-step seeds from the server
    for _, batch in zip(range(config["local_steps"]), batches):
        opt.step(lambda: model(**batch).loss)            # two forward passes, no backward
    return trainable_arrays(model)                       # the LoRA tensors back

:class:`MeZO` is a ``torch.optim.Optimizer``: its ``step(closure)`` calls the closure (which only
computes the loss, never ``backward()``) twice under ``torch.no_grad()``, with the trainable tensors
moved to ``theta + mu z`` and ``theta - mu z``, restores them, and applies
``theta <- theta - lr * g * z`` with ``g = (L+ - L-) / (2 mu)``. ``z`` is never stored (only its
seed), no autograd graph and no optimizer state exist, so the memory is close to inference.

The ready-made clients accept their data as an in-memory dataset (anything with ``__len__`` and
``batch(indices)``, such as the simulation's tokenised ``LMData``, or a ``TensorData`` of token
ids and labels), walked by a stateless deterministic cursor, or as any iterable of batches (a
``DataLoader`` of HF-style dicts or of ``(input_ids, labels)`` pairs), cycled for H steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from flwr.common import Scalar
from torch import nn

from flwr_strategies.core.local import train_steps
from flwr_strategies.core.validation import check_choice, check_number
from flwr_strategies.fedmezo.engine import MeZOEngine, StepResult, trainable_named_params
from flwr_strategies.fedmezo.local import cursor_indices
from flwr_strategies.fedmezo.replay import encode_pairs
from flwr_strategies.fedmezo.server import PAIRS_KEY
from flwr_strategies.fedmezo.zseed import derive_seed
from flwr_strategies.setup import ClientSetup

from .base import TorchClient
from .training import set_weights

__all__ = [
    "MeZO", "trainable_arrays", "load_trainable_arrays", "cast_adapters", "causal_lm_loss", "evaluate_causal_lm",
    "round_batches", "round_steps", "FedMeZOClient", "LoRAFedAvgClient", "ADAPTER_DTYPES",
]

#: ``adapter_dtype`` names and their torch types (``fp16`` = the reference's ``model.half()``).
ADAPTER_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

Batch = Any


# ----------------------------------------------------------------------------- the optimizer
class MeZO(torch.optim.Optimizer):
    """MeZO: a zeroth-order optimizer step on the trainable tensors (Malladi et al., NeurIPS 2023),
    as FedMeZO's clients run it (Ling et al., KDD 2024, Eq. 3).

    Parameters
    ----------
    params : nn.Module | iterable of tensors | iterable of (name, tensor)
        What to tune. A module contributes its parameters with ``requires_grad=True`` (the LoRA
        adapters of a peft model) and is put in ``eval()`` during each step (dropout off, as the
        reference does, so both forward passes see the same network).
    lr : float (default: 1e-5)
        Learning rate, > 0 (paper: 1e-5 to 2.5e-5 for LLaMA-3B). Read from ``param_groups`` at
        each step, so learning-rate schedulers work.
    mu : float (default: 1e-3)
        Perturbation scale, > 0 (paper).
    weight_decay : float (default: 0.0)
        Decoupled weight decay, >= 0, skipped for tensors named bias/layer_norm/layernorm (any letter
        case; ``variant="code"``: as written, the official code's match).
    num_perturbations : int (default: 1)
        Directions averaged per step (2 forward passes each), >= 1.
    restore_mode : str (default: "snapshot")
        ``snapshot`` (bit-exact restore from a copy of the tuned tensors) or ``regenerate``.
    z_device : str (default: "cpu")
        ``cpu`` (portable directions) or ``param`` (drawn on the parameters' device).
    seed : int | tuple[int, int, int] (default: 0)
        Key of the per-step seeds: step k uses ``derive_seed(*key, k)``. FedMeZO's clients use
        ``(run_seed, server_round, partition_id)`` (:meth:`from_config`), which the server can check.
    variant : str (default: "paper")
        ``"paper"`` or ``"code"``: the official FedMeZO code's arithmetic (``g`` from the loss
        tensors, ``theta - lr (g z + wd theta)`` in the tensors' dtype, case-sensitive weight-decay
        name match). With a half-precision model, ``z_device="param"`` and
        ``restore_mode="regenerate"`` it follows the official trainer step for step.

    Attributes
    ----------
    pairs : list[tuple[int, float]]
        The ``(seed, coefficient)`` updates applied so far (the seed-and-scalar upload).
    last : StepResult | None
        The last step's losses and projected gradients.
    n_skipped : int
        Steps skipped because a loss was not finite (the tensors are then left unchanged).
    """

    def __init__(self, params: nn.Module | Iterable, lr: float = 1e-5, mu: float = 1e-3, *, weight_decay: float = 0.0,
                 num_perturbations: int = 1, restore_mode: str = "snapshot", z_device: str = "cpu",
                 seed: int | Sequence[int] = 0, variant: str = "paper") -> None:
        check_number("lr", lr, "a finite number > 0", lambda v: v > 0)
        module = params if isinstance(params, nn.Module) else None
        named = trainable_named_params(module) if module is not None else [
            (str(p[0]), p[1]) if isinstance(p, tuple) else (f"param{i}", p) for i, p in enumerate(params)]
        key = tuple(int(s) for s in seed) if isinstance(seed, (tuple, list)) else (int(seed), 0, 0)
        if len(key) != 3 or any(s < 0 for s in key):
            raise ValueError(f"seed must be an integer >= 0 or (run_seed, server_round, partition_id), got {seed!r}")
        self.engine = MeZOEngine(named, mu=mu, restore_mode=restore_mode, z_device=z_device,
                                 weight_decay=weight_decay, num_perturbations=num_perturbations, module=module,
                                 variant=variant)
        super().__init__([t for _, t in named], {"lr": float(lr), "weight_decay": float(weight_decay)})
        self.seed_key = key
        self.steps = 0
        self.pairs: list[tuple[int, float]] = []
        self.last: StepResult | None = None

    @classmethod
    def from_config(cls, model: nn.Module | Iterable, config: Mapping[str, Any], partition_id: int,
                    default_seed: int = 0) -> "MeZO":
        """The optimizer a FedMeZO server asks for: ``lr``, ``mu``, ``weight_decay``,
        ``num_perturbations``, ``restore_mode``, ``z_device``, ``variant`` and the seed key
        ``(run_seed, server_round, partition_id)`` from the round's ``config``."""
        return cls(model, lr=float(config["lr"]), mu=float(config.get("mu", 1e-3)),
                   weight_decay=float(config.get("weight_decay", 0.0)),
                   num_perturbations=int(config.get("num_perturbations", 1)),
                   restore_mode=str(config.get("restore_mode", "snapshot")), z_device=str(config.get("z_device", "cpu")),
                   seed=(int(config.get("run_seed", default_seed)), int(config.get("server-round", config.get("server_round", 0))), int(partition_id)),
                   variant=str(config.get("variant", "paper")))

    @property
    def n_skipped(self) -> int:
        return self.engine.n_skipped

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor | float]) -> torch.Tensor:  # type: ignore[override]
        """One MeZO step. ``closure()`` returns the loss on this step's batch (no ``backward``);
        it is called 2 * ``num_perturbations`` times on the same batch. Returns L+ (the loss at
        ``theta + mu z``, the reference's reported loss)."""
        if closure is None:
            raise ValueError("MeZO.step needs a closure that computes the loss (it is called twice; no backward)")
        if len(self.param_groups) != 1:
            raise ValueError("MeZO supports one parameter group")
        group = self.param_groups[0]
        self.engine.weight_decay = float(group["weight_decay"])
        res = self.engine.step(closure, float(group["lr"]), derive_seed(*self.seed_key, self.steps))
        self.steps += 1
        self.pairs.extend(res.pairs)
        self.last = res
        return torch.tensor(res.loss_plus)


# ----------------------------------------------------------------------------- payload helpers
def trainable_arrays(model: nn.Module) -> list[np.ndarray]:
    """The trainable tensors (``requires_grad``; the LoRA adapters of a peft model) as NumPy arrays,
    in ``named_parameters`` order: what a FedMeZO / LoRA FedAvg client sends back."""
    return [p.detach().cpu().numpy().copy() for _, p in trainable_named_params(model)]


@torch.no_grad()
def load_trainable_arrays(model: nn.Module, arrays: Sequence[np.ndarray]) -> None:
    """Copy the server's adapter arrays into the trainable tensors (count and shapes must match)."""
    named = trainable_named_params(model)
    if len(arrays) != len(named):
        raise ValueError(f"expected {len(named)} trainable arrays (the LoRA adapters), got {len(arrays)}")
    for (name, p), a in zip(named, arrays):
        a = np.asarray(a)
        if tuple(a.shape) != tuple(p.shape):
            raise ValueError(f"trainable tensor {name}: array shape {a.shape} != {tuple(p.shape)}")
        p.copy_(torch.from_numpy(a).to(device=p.device, dtype=p.dtype))


@torch.no_grad()
def cast_adapters(model: nn.Module, dtype: str | torch.dtype) -> nn.Module:
    """Cast the trainable tensors to ``dtype`` (``"fp32"``, ``"fp16"``, ``"bf16"`` or a torch dtype).

    ``"fp16"`` gives half-precision adapters, as the official code's ``model.half()`` does (which
    halves the base model too: cast the base with it for the official precision); there an update of
    1e-5 on values near 1e-2 is close to one fp16 ulp, so many updates round away. The library's
    default keeps adapters in fp32.
    """
    if isinstance(dtype, str):
        dtype = ADAPTER_DTYPES[check_choice("adapter_dtype", dtype, ADAPTER_DTYPES)]
    for _, p in trainable_named_params(model):
        p.data = p.data.to(dtype)
    return model


# ----------------------------------------------------------------------------- batches and losses
def _to(batch: Batch, device) -> Batch:
    if isinstance(batch, Mapping):
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(v.to(device) if torch.is_tensor(v) else v for v in batch)
    return batch.to(device)


def _batch_len(batch: Batch) -> int:
    if isinstance(batch, Mapping):
        ref = batch.get("input_ids", next(iter(batch.values())))
    elif isinstance(batch, (tuple, list)):
        ref = batch[0]
    else:
        ref = batch
    return int(ref.shape[0])


def causal_lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The model's loss on ``batch``: ``model(**batch).loss`` for a dict (HF style), or
    ``model(input_ids=x, labels=y).loss`` for an ``(x, y)`` pair."""
    if isinstance(batch, Mapping):
        return model(**batch).loss
    x, y = batch
    return model(input_ids=x, labels=y).loss


def _indexable(data: Any) -> bool:
    return hasattr(data, "__len__") and (hasattr(data, "batch") or (hasattr(data, "x") and hasattr(data, "y")))


def _take(data: Any, idx: Sequence[int]) -> Batch:
    if hasattr(data, "batch"):
        return data.batch(idx)
    ix = torch.as_tensor(list(idx), dtype=torch.long, device=data.x.device)
    return data.x[ix], data.y[ix]


def round_steps(config: Mapping[str, Any], data: Any, batch_size: int) -> int:
    """H, the local steps of this round: ``local_steps``, or ``local_epochs`` passes over the data."""
    steps = int(config.get("local_steps", 0) or 0)
    if steps > 0:
        return steps
    epochs = int(config.get("local_epochs", 0) or 0)
    if epochs < 1:
        raise ValueError("the server config sets neither local_steps nor local_epochs (>= 1)")
    if _indexable(data):
        return epochs * math.ceil(len(data) / batch_size)
    if not hasattr(data, "__len__"):
        raise ValueError("local_epochs needs data with a length (or set local_steps)")
    return epochs * len(data)


def round_batches(data: Any, steps: int, batch_size: int, *, run_seed: int, server_round: int,
                  partition_id: int) -> Iterator[Batch]:
    """The round's ``steps`` batches.

    In-memory data (``__len__`` + ``batch(indices)``, or ``TensorData``): example ``s`` of the
    client's endless stream, ``s = ((round-1)*steps + k)*batch_size + b``, is ``perm_e[s mod n]``
    with ``perm_e`` seeded by ``(run_seed, partition_id, s // n)``: stateless and reproducible.
    Any other iterable of batches is cycled (re-iterated when exhausted).
    """
    if _indexable(data):
        n = len(data)
        for k in range(steps):
            s0 = ((int(server_round) - 1) * steps + k) * batch_size
            yield _take(data, cursor_indices(n, s0, batch_size, run_seed, partition_id))
        return
    it = iter(data)
    for k in range(steps):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(data)
            try:
                batch = next(it)
            except StopIteration:
                raise ValueError(f"client {partition_id} has an empty training set") from None
        yield batch


def _eval_batches(data: Any, batch_size: int = 50) -> Iterator[Batch]:
    if _indexable(data):
        for s in range(0, len(data), batch_size):
            yield _take(data, range(s, min(len(data), s + batch_size)))
    else:
        yield from data


@torch.no_grad()
def evaluate_causal_lm(model: nn.Module, batches: Iterable[Batch]) -> tuple[float, dict[str, float]]:
    """Mean per-example response-token cross-entropy (labels -100 are masked) and next-token accuracy
    on the response tokens. Returns ``(loss, {"accuracy", "test_loss", "num_examples"})``."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    losses, correct, total = [], 0, 0
    for b in batches:
        if not isinstance(b, Mapping):
            x, y = b
            b = {"input_ids": x, "labels": y}
        b = _to(b, dev)
        kwargs = {"input_ids": b["input_ids"]}
        if "attention_mask" in b:
            kwargs["attention_mask"] = b["attention_mask"]
        logits = model(**kwargs).logits.float()
        lab = b["labels"][:, 1:]
        lg = logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(lg.transpose(1, 2), lab, ignore_index=-100, reduction="none")
        mask = lab != -100
        cnt = mask.sum(1).clamp(min=1)
        losses.append((ce.sum(1) / cnt).cpu())
        correct += int(((lg.argmax(-1) == lab) & mask).sum())
        total += int(mask.sum())
    model.train(was)
    n = int(sum(len(x) for x in losses))
    loss = float(torch.cat(losses).mean()) if losses else float("nan")
    return loss, {"accuracy": correct / max(1, total), "test_loss": loss, "num_examples": n}


# ----------------------------------------------------------------------------- ready-made clients
class _LoRAClient(TorchClient):
    """Shared by both clients: adapters in and out, data access, evaluation."""

    def __init__(self, setup: ClientSetup, params: dict[str, Any] | None = None, *,
                 loss_fn: Callable[[nn.Module, Batch], torch.Tensor] | None = None) -> None:
        super().__init__(setup, params)
        trainable_named_params(self.model)  # raises when nothing is trainable
        self.loss_fn = loss_fn or causal_lm_loss
        if _indexable(setup.train_data) and len(setup.train_data) == 0:
            raise ValueError(f"client {self.partition_id} has an empty training set")

    def get_parameters(self, config: dict[str, Scalar]) -> list[np.ndarray]:
        return trainable_arrays(self.model)

    def with_defaults(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The server's ``config`` over this client's ``ClientSetup.train`` settings (used when a
        strategy other than FedMeZO's sends fewer keys), with the round as ``server_round``."""
        t = self.setup.train
        rnd = int(config.get("server-round", config.get("server_round", 1)))
        base = {"lr": t.lr_at(rnd), "local_steps": int(t.local_steps or 0), "local_epochs": int(t.local_epochs or 0),
                "batch_size": int(t.batch_size), "weight_decay": float(t.weight_decay), "momentum": float(t.momentum),
                "run_seed": int(self.setup.seed)}
        if t.grad_clip is not None:
            base["grad_clip"] = float(t.grad_clip)
        return {**base, **dict(config), "server_round": rnd}

    def _batches(self, config: Mapping[str, Any]) -> tuple[int, int, Iterator[Batch]]:
        B = int(config.get("batch_size") or 1)
        H = round_steps(config, self.setup.train_data, B)
        it = round_batches(self.setup.train_data, H, B, run_seed=int(config["run_seed"]), server_round=config["server_round"],
                           partition_id=self.partition_id)
        return H, B, (_to(b, self.setup.device) for b in it)

    def evaluate(self, parameters, config):
        if len(parameters) == len(trainable_named_params(self.model)):  # the adapters only, else the state_dict
            load_trainable_arrays(self.model, parameters)
        else:
            set_weights(self.model, list(parameters))
        data = self.setup.test_data if self.setup.test_data is not None else self.setup.train_data
        loss, m = evaluate_causal_lm(self.model, _eval_batches(data))
        n = int(m.pop("num_examples"))
        return float(loss), n, {**self.base_metrics(), **m}


class FedMeZOClient(_LoRAClient):
    """FedMeZO client: H :class:`MeZO` steps on the adapters at the server-sent learning rate.

    Config keys read: ``server_round``, ``lr``, ``mu``, ``local_steps`` (or ``local_epochs``),
    ``batch_size``, ``weight_decay``, ``num_perturbations``, ``run_seed``, ``restore_mode``,
    ``z_device``, ``variant``, ``comm_mode`` (``params``: return the adapters; ``seeds``: return no arrays and
    the (seed, coefficient) pairs as the bytes metric ``zo_pairs``, 16 bytes per step).
    ``momentum`` and ``grad_clip`` are rejected (MeZO keeps no optimizer state and has no gradient).

    Reply: ``num_examples = H * batch_size`` (or the examples seen, for a DataLoader) and metrics
    ``train_loss`` (mean L+ over the steps taken, omitted if every step was skipped),
    ``train_loss_mid``, ``n_skipped``, ``proj_grad_abs_mean``, ``lr_used``, ``partition-id``.
    """

    def fit(self, parameters, config):
        config = self.with_defaults(config)
        for key, why in (("momentum", "MeZO keeps no optimizer state"), ("grad_clip", "MeZO computes no gradient to clip")):
            if config.get(key) not in (None, 0, 0.0):
                raise ValueError(f"FedMeZO: {key}={config[key]!r} is not supported: {why}")
        load_trainable_arrays(self.model, parameters)
        opt = MeZO.from_config(self.model, config, self.partition_id, default_seed=self.setup.seed)
        H, B, batches = self._batches(config)
        lp, mid, gabs, seen = [], [], [], 0
        for batch in batches:
            opt.step(lambda: self.loss_fn(self.model, batch))
            seen += _batch_len(batch)
            res = opt.last
            if not res.skipped:
                lp.append(res.loss_plus)
                mid.append(0.5 * (res.loss_plus + res.loss_minus))
                gabs.append(abs(res.g))
        metrics: dict[str, Scalar] = {**self.base_metrics(), "n_skipped": int(opt.n_skipped),
                                      "lr_used": float(config["lr"])}
        if lp:
            metrics.update(train_loss=float(np.mean(lp)), train_loss_mid=float(np.mean(mid)),
                           proj_grad_abs_mean=float(np.mean(gabs)))
        if str(config.get("comm_mode", "params")) == "seeds":
            metrics[PAIRS_KEY] = encode_pairs(opt.pairs)
            return [], seen, metrics
        return trainable_arrays(self.model), seen, metrics


class LoRAFedAvgClient(_LoRAClient):
    """Backprop baseline: H steps of ``torch.optim.SGD`` (``lr``, ``momentum``, ``weight_decay``,
    optional ``grad_clip``) on the adapters, over the same batches as :class:`FedMeZOClient`.
    Dropout (LoRA's 0.05) is on, drawn from a generator seeded by (run_seed, round, partition)."""

    def fit(self, parameters, config):
        config = self.with_defaults(config)
        load_trainable_arrays(self.model, parameters)
        params = [p for _, p in trainable_named_params(self.model)]
        opt = torch.optim.SGD(params, lr=float(config["lr"]), momentum=float(config.get("momentum", 0.0) or 0.0),
                              weight_decay=float(config.get("weight_decay", 0.0) or 0.0))
        clip = config.get("grad_clip")
        hooks = [lambda: nn.utils.clip_grad_norm_(params, float(clip))] if clip else []
        H, B, batches = self._batches(config)
        dev = torch.device(self.setup.device) if self.setup.device is not None else torch.device("cpu")
        seed = derive_seed(int(config["run_seed"]), config["server_round"], self.partition_id, 0, 1)
        sizes: list[int] = []

        def pairs() -> Iterator[tuple[Batch, None]]:
            for batch in batches:
                sizes.append(_batch_len(batch))
                yield batch, None

        was = self.model.training
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(seed)
            stats = train_steps(self.model, pairs(), opt, objective=lambda model, batch, _: self.loss_fn(model, batch),
                                after_backward=hooks)
        self.model.train(was)
        metrics = {**self.base_metrics(), "train_loss": float(stats["train_loss"]), "lr_used": float(config["lr"]),
                   "n_skipped": 0}
        return trainable_arrays(self.model), sum(sizes), metrics
