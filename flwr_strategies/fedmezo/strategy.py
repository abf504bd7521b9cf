"""FedMeZO server strategy (legacy Flower ``Strategy``).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926), Algorithm 1 and Proposition 3.7.

Only the LoRA tensors travel: the server holds the full model template (for central evaluation)
and sends the trainable LoRA arrays. Each sampled client gets its own ``FitIns`` carrying its
learning rate (personalised rates, :mod:`.lr_rules`). The new global LoRA is the uniform mean of
the clients' returned tensors (A and B averaged separately), computed in float64 and cast back.

Optional extension, NOT from the paper (``comm_mode="seeds"``): clients upload their
``(seed, coef)`` pairs (16 bytes per MeZO step) instead of the tensors, and the server replays
them from the round's global LoRA (:func:`.replay.replay_updates`). In snapshot restore mode this
yields bit-identical aggregates to the plain upload.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from flwr.common import (EvaluateIns, FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters,
                         parameters_to_ndarrays)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg

from ..common import partition_id_of, resolve_partitions
from .lr_rules import LR_STRATEGIES, PersonalisedLR, model_diff_signal
from .replay import decode_pairs, replay_updates

COMM_MODES = ("params", "seeds")
WEIGHTINGS = ("uniform", "num_examples")


def lora_indices(state_keys: list[str]) -> list[int]:
    """Positions of the LoRA tensors in a peft model's ``state_dict`` order."""
    idx = [i for i, k in enumerate(state_keys) if "lora_" in k]
    if not idx:
        raise ValueError("the model has no LoRA tensors (state_dict keys containing 'lora_')")
    return idx


class FedMeZO(FedAvg):
    """FedMeZO: FedAvg over LoRA adapters trained locally with MeZO (zeroth-order) steps.

    Parameters
    ----------
    full_template : list[np.ndarray]
        Full model state (``state_dict`` order) at round 0; the LoRA entries are the initial global
        LoRA, the rest is the frozen base used for central evaluation.
    lora_idx : list[int]
        Positions of the LoRA tensors in ``full_template``.
    num_clients : int
        Number of partitions N (>= 1).
    lr : float (default: 1e-5)
        Base learning rate eta0 (> 0).
    mu : float (default: 1e-3)
        MeZO perturbation scale (> 0), sent to the clients.
    local_steps : int (default: 30)
        H, MeZO steps per round (>= 1).
    batch_size : int (default: 1)
        Examples per step (>= 1).
    lr_strategy : str (default: "frozen")
        ``frozen``, ``random``, ``round-wise``, ``five-round`` or ``model-diff``.
    lr_alpha : float (default: 5e-6)
        Absolute spread of the personalised rates (``0 <= lr_alpha < lr``).
    lr_window : int (default: 5)
        Rounds averaged by ``five-round``.
    weighting : str (default: "uniform")
        ``uniform`` (paper) or ``num_examples``.
    comm_mode : str (default: "params")
        ``params`` (paper) or ``seeds`` (extension; needs weight decay 0).
    z_device, restore_mode : str
        Sent to the clients (see :class:`.engine.MeZOEngine`).
    eval_every : int (default: 1)
        Central evaluation period in rounds (the last round is always evaluated). >= 1.
    run_seed : int (default: 0)
        Seed of the per-step MeZO seeds and the random-rate draws.
    extra_config : dict
        Further Scalars added to every client config.
    evaluate_full_fn : callable
        Flower ``evaluate_fn`` on FULL model arrays (the runner's central evaluation).
    """

    def __init__(self, *, full_template: list[np.ndarray], lora_idx: list[int], num_clients: int,
                 lr: float = 1e-5, mu: float = 1e-3, local_steps: int = 30, batch_size: int = 1,
                 weight_decay: float = 0.0, num_perturbations: int = 1, lr_strategy: str = "frozen",
                 lr_alpha: float = 5e-6, lr_window: int = 5, weighting: str = "uniform",
                 comm_mode: str = "params", z_device: str = "cpu", restore_mode: str = "snapshot",
                 eval_every: int = 1, num_rounds: int | None = None, run_seed: int = 0, fraction_fit: float = 1.0,
                 extra_config: dict[str, Scalar] | None = None, evaluate_full_fn=None) -> None:
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be > 0, got {lr!r}")
        if not (math.isfinite(mu) and mu > 0):
            raise ValueError(f"mu (perturbation scale) must be > 0, got {mu!r}")
        if local_steps < 1 or batch_size < 1:
            raise ValueError(f"local_steps and batch_size must be >= 1, got {local_steps}, {batch_size}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        if comm_mode not in COMM_MODES:
            raise ValueError(f"comm_mode must be one of {COMM_MODES}, got {comm_mode!r}")
        if comm_mode == "seeds" and weight_decay > 0:
            raise ValueError("comm_mode='seeds' needs weight_decay == 0 (the update is then linear in z)")
        if eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        self.full_template = [np.asarray(a).copy() for a in full_template]
        self.lora_idx = list(lora_idx)
        init = [self.full_template[i] for i in self.lora_idx]
        super().__init__(fraction_fit=fraction_fit, fraction_evaluate=0.0, min_fit_clients=1,
                         min_evaluate_clients=0, min_available_clients=num_clients, accept_failures=True,
                         initial_parameters=ndarrays_to_parameters(init))
        self.num_clients = int(num_clients)
        if lr_strategy == "frozen":
            lr_alpha = 0.0
        self.lr_rule = PersonalisedLR(lr_strategy, eta0=lr, alpha=lr_alpha, window=lr_window, seed=run_seed)
        self.cfg = {"mu": float(mu), "local_steps": int(local_steps), "batch_size": int(batch_size),
                    "weight_decay": float(weight_decay), "num_perturbations": int(num_perturbations),
                    "run_seed": int(run_seed), "seed": int(run_seed), "restore_mode": restore_mode,
                    "z_device": z_device, "comm_mode": comm_mode, **(extra_config or {})}
        self.weighting, self.comm_mode, self.z_device = weighting, comm_mode, z_device
        self.eval_every, self.num_rounds = int(eval_every), num_rounds
        self.evaluate_full_fn = evaluate_full_fn
        self._current: list[np.ndarray] = init
        self._sent_lr: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"FedMeZO(lr_strategy={self.lr_rule.strategy}, comm_mode={self.comm_mode})"

    # ------------------------------------------------------------------ fit
    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        self._current = parameters_to_ndarrays(parameters)
        by_pid = resolve_partitions(client_manager)
        pid_of = {proxy.cid: pid for pid, proxy in by_pid.items()}
        sample_size, min_num = self.num_fit_clients(client_manager.num_available())
        clients = client_manager.sample(num_clients=sample_size, min_num_clients=min_num)
        pids = [pid_of[c.cid] for c in clients]
        rates = self.lr_rule.rates(server_round, pids)
        self._sent_lr = dict(rates)
        out = []
        for c, pid in sorted(zip(clients, pids), key=lambda t: t[1]):
            cfg = {**self.cfg, "server_round": int(server_round), "lr": float(rates[pid])}
            out.append((c, FitIns(parameters, cfg)))
        return out

    def client_arrays(self, res: FitRes) -> list[np.ndarray]:
        """The client's final LoRA tensors: uploaded, or replayed from its (seed, coef) pairs."""
        if self.comm_mode == "seeds":
            pid = partition_id_of(res)
            pairs = decode_pairs(bytes(res.metrics["zo_pairs"]))
            return replay_updates(self._current, pairs, self._sent_lr[pid], z_device=self.z_device)
        return parameters_to_ndarrays(res.parameters)

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures):
        if not results:
            return None, {"failures": len(failures)}
        arrays = [self.client_arrays(r) for _, r in results]
        if self.weighting == "uniform":
            w = np.full(len(arrays), 1.0 / len(arrays))
        else:
            n = np.array([r.num_examples for _, r in results], dtype=np.float64)
            w = n / n.sum()
        new = []
        for k, ref in enumerate(arrays[0]):
            acc = sum(wi * a[k].astype(np.float64) for wi, a in zip(w, arrays))
            new.append(acc.astype(ref.dtype))
        pids = [partition_id_of(r) for _, r in results]
        losses = {p: float(r.metrics.get("train_loss", float("nan"))) for p, (_, r) in zip(pids, results)}
        diffs = {p: model_diff_signal(a, new) for p, a in zip(pids, arrays)}
        self.lr_rule.record(server_round, losses, diffs)
        finite = [v for v in losses.values() if math.isfinite(v)]
        metrics: dict[str, Scalar] = {
            "train_loss": float(np.mean(finite)) if finite else float("nan"),
            "n_skipped": int(sum(int(r.metrics.get("n_skipped", 0)) for _, r in results)),
            "lr_min": float(min(self._sent_lr.get(p, self.lr_rule.eta0) for p in pids)),
            "lr_max": float(max(self._sent_lr.get(p, self.lr_rule.eta0) for p in pids)),
        }
        for p in pids:
            metrics[f"lr_{p}"] = float(self._sent_lr.get(p, self.lr_rule.eta0))
        return ndarrays_to_parameters(new), metrics

    # ------------------------------------------------------------------ evaluate
    def full_arrays(self, lora: list[np.ndarray]) -> list[np.ndarray]:
        full = list(self.full_template)
        for i, a in zip(self.lora_idx, lora):
            full[i] = a
        return full

    def evaluate(self, server_round: int, parameters: Parameters):
        if self.evaluate_full_fn is None:
            return None
        last = self.num_rounds is not None and server_round == self.num_rounds
        if server_round != 0 and server_round % self.eval_every and not last:
            return None
        return self.evaluate_full_fn(server_round, self.full_arrays(parameters_to_ndarrays(parameters)), {})

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        return []
