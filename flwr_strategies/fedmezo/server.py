"""Server cores of FedMeZO and of its backprop baseline LoRA FedAvg (framework-neutral).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926), Algorithm 1 and Proposition 3.7.

Both cores keep the full initial model (``initial_arrays``, e.g. a peft model's ``state_dict``)
and tune only its trainable arrays (the LoRA adapters, by position). Clients receive and return
only those arrays (``Instruction.model_layout=False``): 1.23% of the parameters for LLaMA-3B at
r=128. :meth:`LoRAServer.global_arrays` rebuilds the whole model in the initial layout, so a
user's ``evaluate_fn`` loads it like any checkpoint.

The new global adapters are the uniform mean of the clients' returned tensors (A and B averaged
separately, as paper and code do), computed in float64 and cast back to the adapters' dtype.
FedMeZO adds per-client learning rates (:mod:`.lr_rules`) and, as an extension that is not in
the paper, the seed-and-scalar upload (:mod:`.replay`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.aggregation import aggregation_weights
from ..core.messages import ArraySpec, Instruction, Reply, ReplySpec
from ..core.server import ExternalModelError, ServerCore, check_model_arrays
from ..core.validation import ReplyError, require_finite
from ..fedmud.aggregation import weighted_mean
from .config import FedMeZOConfig, LoRAFedAvgConfig
from .engine import direction_seed
from .lr_rules import PersonalisedLR, model_diff_signal
from .replay import PAIR_DTYPE, replay_updates
from .zseed import derive_seed

__all__ = ["LoRAServer", "FedMeZOServer", "LoRAFedAvgServer", "lora_positions", "PAIRS_KEY"]

#: Metric carrying a client's (seed, coefficient) pairs in ``comm_mode="seeds"``.
PAIRS_KEY = "zo_pairs"


def lora_positions(keys: Sequence[str], marker: str = "lora_") -> list[int]:
    """Positions of the LoRA tensors among a peft model's ``state_dict`` keys (names containing
    ``marker``)."""
    idx = [i for i, k in enumerate(keys) if marker in str(k)]
    if not idx:
        raise ValueError(f"no array name contains {marker!r}: pass the positions of the trainable arrays "
                         "(trainable=[...]) or the model's state_dict names")
    return idx


def _check_trainable(trainable: Sequence[int], arrays: Sequence[np.ndarray]) -> list[int]:
    out = []
    for t in trainable:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < len(arrays):
            raise ValueError(f"trainable positions must be integers in 0..{len(arrays) - 1}, got {t!r}")
        if np.asarray(arrays[int(t)]).dtype.kind != "f":
            raise ValueError(f"trainable array {int(t)} has dtype {np.asarray(arrays[int(t)]).dtype}, not floating")
        out.append(int(t))
    if not out:
        raise ValueError("trainable is empty: name the arrays the clients tune (the LoRA adapters)")
    if len(set(out)) != len(out):
        raise ValueError(f"trainable positions repeat: {out}")
    return out


class LoRAServer(ServerCore):
    """Shared core of the LoRA methods: the frozen model, the global adapters and their mean.

    Parameters
    ----------
    initial_arrays : list[np.ndarray]
        The whole initial model (``state_dict`` order): frozen base and initial adapters.
    trainable : Sequence[int]
        Positions of the tuned arrays (LoRA A and B) in ``initial_arrays``.
    config : FedMeZOConfig | LoRAFedAvgConfig | None (default: None)
        The method's hyperparameters, an instance of :attr:`config_cls` (None: its paper defaults).
    final_round : int | None (default: None)
        Last round of the run, always evaluated (None: only every ``eval_every`` rounds).
    **kwargs
        :class:`~flwr_strategies.core.server.ServerCore` arguments (num_partitions,
        fraction_train, min_train, seed, on_train_config).
    """

    #: The method's config dataclass.
    config_cls: type = FedMeZOConfig

    def __init__(self, initial_arrays, *, trainable: Sequence[int], config: Any = None, final_round: int | None = None,
                 **kwargs: Any) -> None:
        config = config if config is not None else self.config_cls()
        if not isinstance(config, self.config_cls):
            raise TypeError(f"config must be a {self.config_cls.__name__}, got {type(config).__name__}")
        super().__init__(initial_arrays, **kwargs)
        self.trainable = _check_trainable(list(trainable), self.initial_arrays)
        if final_round is not None and (isinstance(final_round, bool) or int(final_round) != final_round
                                        or final_round < 0):
            raise ValueError(f"final_round must be an integer >= 0 or None, got {final_round!r}")
        self.final_round = None if final_round is None else int(final_round)
        self.config = config
        self.current = [np.array(self.initial_arrays[i], copy=True) for i in self.trainable]
        self.adapter_spec = tuple(ArraySpec.like(a) for a in self.current)
        self._sent_lr: dict[int, float] = {}

    def __repr__(self) -> str:
        n = sum(int(a.size) for a in self.current)
        return f"{type(self).__name__}(trainable={len(self.trainable)} arrays / {n:,} values, {self.config})"

    # ------------------------------------------------------------------ rates and configs
    def lr_scale(self, server_round: int) -> float:
        """The round's learning-rate decay factor ``lr_decay**(t-1)``."""
        return float(self.config.lr_decay ** max(0, int(server_round) - 1))

    def client_rates(self, server_round: int, partition_ids: list[int]) -> dict[int, float]:
        """Learning rate of each sampled client (eta0 for everyone unless personalised)."""
        return {pid: self.config.lr * self.lr_scale(server_round) for pid in partition_ids}

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        rates = self.client_rates(server_round, partition_ids)
        base = {**self.base_config(server_round), **self.config.client_config(), "run_seed": int(self.seed)}
        self._sent_lr = {int(p): float(rates[p]) for p in partition_ids}
        return [Instruction(pid, self.current, {**base, "lr": float(rates[pid])}, model_layout=False)
                for pid in partition_ids]

    # ------------------------------------------------------------------ replies
    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        return ReplySpec(self.adapter_spec)

    def check_reply(self, server_round: int, reply: Reply) -> None:
        if self.config.weighting == "num_examples" and reply.num_examples < 1:
            raise ReplyError(f"partition {reply.partition_id} reported num_examples = {reply.num_examples} "
                             "(no weight in the example-weighted mean)")
        loss = reply.metrics.get("train_loss")
        if loss is not None and (isinstance(loss, (bool, str, bytes)) or not math.isfinite(float(loss))):
            raise ReplyError(f"partition {reply.partition_id}: metric 'train_loss' = {loss!r} is not a finite number")

    def client_arrays(self, reply: Reply) -> list[np.ndarray]:
        """A validated reply's final adapters."""
        return reply.arrays

    # ------------------------------------------------------------------ aggregation
    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        if not replies:
            return {}
        arrays = [self.client_arrays(r) for r in replies]
        # per-array mean (uniform, or weighted by examples) in float64, cast to the adapters' dtype
        new = weighted_mean(arrays, aggregation_weights([r.num_examples for r in replies], self.config.weighting))
        require_finite(f"{type(self).__name__}'s averaged adapters", new)
        pids = [r.partition_id for r in replies]
        losses = {p: float(r.metrics["train_loss"]) for p, r in zip(pids, replies) if "train_loss" in r.metrics}
        diffs = {p: model_diff_signal(a, new) for p, a in zip(pids, arrays)}
        require_finite("the clients' model-difference signals", list(diffs.values()))
        metrics = self.round_metrics(replies, losses)
        self.commit(server_round, new, losses, diffs)
        return metrics

    def round_metrics(self, replies: list[Reply], losses: Mapping[int, float]) -> dict[str, Any]:
        lrs = [self._sent_lr.get(r.partition_id, float("nan")) for r in replies]
        out: dict[str, Any] = {"train_loss": float(np.mean(list(losses.values()))) if losses else float("nan"),
                               "lr_min": float(min(lrs)), "lr_max": float(max(lrs))}
        for key in ("train_loss_mid", "proj_grad_abs_mean"):
            vals = [float(r.metrics[key]) for r in replies if isinstance(r.metrics.get(key), (int, float))
                    and math.isfinite(float(r.metrics[key]))]
            if vals:
                out[key] = float(np.mean(vals))
        out["n_skipped"] = int(sum(int(r.metrics.get("n_skipped", 0) or 0) for r in replies
                                   if isinstance(r.metrics.get("n_skipped", 0), (int, float))))
        return out

    def commit(self, server_round: int, new: list[np.ndarray], losses: Mapping[int, float],
               diffs: Mapping[int, float]) -> None:
        """Make the round's results the state (last step of ``aggregate_train``; cannot fail)."""
        self.current = new

    # ------------------------------------------------------------------ model and evaluation
    def global_arrays(self) -> list[np.ndarray]:
        """The whole model in the initial layout, with the current global adapters."""
        full = list(self.initial_arrays)
        for i, a in zip(self.trainable, self.current):
            full[i] = a
        return full

    def adopt_global_arrays(self, arrays: list[np.ndarray]) -> None:
        """Continue from the adapters of ``arrays`` (a whole model a strategy wrapper changed).

        Only the adapters travel to the clients; the clients keep their own frozen base, so a
        change to a frozen array could never reach them and is refused (``ExternalModelError``).
        """
        arrays = check_model_arrays(arrays, self.initial_arrays, "the global model passed to the strategy")
        tuned = set(self.trainable)
        changed = [j for j, (a, b) in enumerate(zip(arrays, self.initial_arrays))
                   if j not in tuned and not np.array_equal(a, b)]
        if changed:
            raise ExternalModelError(
                f"{type(self).__name__} cannot take the global model passed to it: frozen (non-LoRA) arrays {changed[:5]} "
                "changed, but only the adapters travel to the clients, which keep their own frozen base, so the "
                "change would never reach them. A wrapper that changes the model must leave the frozen arrays as they are"
            )
        self.current = [arrays[i] for i in self.trainable]

    def should_evaluate(self, server_round: int) -> bool:
        return (server_round == 0 or server_round % self.config.eval_every == 0
                or (self.final_round is not None and server_round == self.final_round))

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        return {"current": list(self.current)}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        current = [np.array(a) for a in state["current"]]
        if [ArraySpec.like(a) for a in current] != list(self.adapter_spec):
            raise ValueError("checkpoint adapters do not match this model's trainable arrays")
        self.current = current


class FedMeZOServer(LoRAServer):
    """FedMeZO (Ling et al., KDD 2024): FedAvg of LoRA adapters tuned by MeZO zeroth-order steps.

    Each client runs H MeZO steps (two forward passes, no backward) on the adapters it receives
    and returns them; the server averages them. With a personalised ``lr_strategy`` each client
    gets ``eta_i = eta0 + alpha * Phi_i``, where ``Phi_i`` in [-1, 1] normalises a heterogeneity
    signal from the previous round(s) (paper Proposition 3.7).

    Parameters as :class:`LoRAServer` (``trainable``: :func:`lora_positions` finds the LoRA arrays
    by name), ``config`` a :class:`FedMeZOConfig`.
    """

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        c = self.config
        self.lr_rule = PersonalisedLR(c.lr_strategy, eta0=c.lr, alpha=c.alpha, window=c.lr_window, seed=self.seed)
        self._replayed: dict[int, list[np.ndarray]] = {}

    def client_rates(self, server_round: int, partition_ids: list[int]) -> dict[int, float]:
        return self.lr_rule.rates(server_round, partition_ids, scale=self.lr_scale(server_round))

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        self._replayed = {}
        return super().configure_train(server_round, partition_ids)

    # ------------------------------------------------------------------ seed-and-scalar replies
    def reply_spec(self, server_round: int, partition_id: int) -> ReplySpec:
        if self.config.comm_mode == "seeds":
            return ReplySpec(arrays=())
        return super().reply_spec(server_round, partition_id)

    def expected_seeds(self, server_round: int, partition_id: int) -> dict[int, tuple[int, int]]:
        """Seed -> (step, direction) of every direction the client may have used this round."""
        c = self.config
        steps = [derive_seed(self.seed, server_round, partition_id, k) for k in range(int(c.local_steps))]
        return {direction_seed(step_seed, j): (k, j) for k, step_seed in enumerate(steps)
                for j in range(c.num_perturbations)}

    def check_reply(self, server_round: int, reply: Reply) -> None:
        super().check_reply(server_round, reply)
        if self.config.comm_mode != "seeds":
            return
        pid = reply.partition_id
        blob = reply.metrics.get(PAIRS_KEY)
        if not isinstance(blob, (bytes, bytearray)):
            raise ReplyError(f"partition {pid}: comm_mode='seeds' needs the bytes metric '{PAIRS_KEY}', "
                             f"got {type(blob).__name__}")
        if len(blob) % PAIR_DTYPE.itemsize:
            raise ReplyError(f"partition {pid}: '{PAIRS_KEY}' has {len(blob)} bytes, not a multiple of "
                             f"{PAIR_DTYPE.itemsize}")
        rec = np.frombuffer(bytes(blob), dtype=PAIR_DTYPE)
        n = self.config.num_perturbations
        if len(rec) > self.config.local_steps * n:
            raise ReplyError(f"partition {pid}: {len(rec)} (seed, coefficient) pairs for {self.config.local_steps} "
                             f"steps x {n} directions")
        expected = self.expected_seeds(server_round, pid)
        last = (-1, n - 1)
        for i, (seed, coef) in enumerate(zip(rec["seed"].tolist(), rec["coef"].tolist())):
            if seed not in expected:
                raise ReplyError(f"partition {pid}: pair {i} has seed {seed}, not one of this round's MeZO seeds")
            k, j = expected[seed]
            ok = (k == last[0] and j == last[1] + 1) if last[1] < n - 1 else (k > last[0] and j == 0)
            if not ok:
                raise ReplyError(f"partition {pid}: pair {i} (step {k}, direction {j}) is out of order or repeated")
            if not math.isfinite(coef):
                raise ReplyError(f"partition {pid}: pair {i} has a non-finite coefficient {coef!r}")
            last = (k, j)
        if last[1] != n - 1:
            raise ReplyError(f"partition {pid}: the last step has {last[1] + 1} of {n} directions")
        lr = self._sent_lr.get(pid)
        if lr is None:
            raise ReplyError(f"partition {pid} was sent no learning rate this round")
        pairs = list(zip(rec["seed"].tolist(), rec["coef"].tolist()))
        try:
            arrays = replay_updates(self.current, pairs, lr, z_device=self.config.z_device)
        except (RuntimeError, OverflowError) as err:  # a coefficient too large for the adapters' dtype
            raise ReplyError(f"partition {pid}: replaying its pairs gives non-finite adapters ({err})") from None
        if not all(np.isfinite(a).all() for a in arrays):
            raise ReplyError(f"partition {pid}: replaying its pairs gives non-finite adapters")
        self._replayed[pid] = arrays

    def client_arrays(self, reply: Reply) -> list[np.ndarray]:
        if self.config.comm_mode == "seeds":
            return self._replayed[reply.partition_id]
        return reply.arrays

    # ------------------------------------------------------------------ state
    def commit(self, server_round: int, new, losses, diffs) -> None:
        self.current = new
        self.lr_rule.record(server_round, losses, diffs)

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "lr_rule": self.lr_rule.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.lr_rule.load_state_dict(state["lr_rule"])


class LoRAFedAvgServer(LoRAServer):
    """LoRA FedAvg: FedMeZO's backprop baseline ("BP-based FedAvg", Ling et al., KDD 2024, Sec. 5).

    Clients run plain SGD on the LoRA adapters; the server averages them like FedMeZO.

    Parameters as :class:`LoRAServer`, ``config`` a :class:`LoRAFedAvgConfig`.
    """

    config_cls = LoRAFedAvgConfig
