"""FedMUD strategy (legacy Flower ``Strategy``) for all six variants and the low-rank baselines.

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025 (spec 004).

Each round the strategy sends every sampled client only the averaged trainable factors and the
dense arrays (plus the round's seeds in the config); frozen factors and ``W_base`` are regenerated
from seeds / kept by the clients in ``context.state``. Clients send back only their trained
factors and dense arrays. With partial participation, a client that missed merges also receives
them (or the full base when smaller); that traffic is counted and reported as ``sync_bytes``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from flwr.common import EvaluateIns, FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from ..common import partition_id_of, resolve_partitions
from .options import MUDOptions
from .protocol import MUDServer

__all__ = ["FedMUDStrategy"]


class FedMUDStrategy(Strategy):
    """FedMUD: model update decomposition with BKD and AAD (default FedMUD+BKD+AAD).

    Parameters
    ----------
    model : torch.nn.Module
        A plain model of the experiment (structure; copied).
    initial_parameters : list of np.ndarray
        Initial weights, every state-dict entry in order (dense layers start from these; the
        compressed layers' ``W_base`` is regenerated from the seed, see ``MUDOptions.base_init``).
    options : MUDOptions (default FedMUD+BKD+AAD at ratio 1/32, s = 1)
        Variant and hyper-parameters; validated on construction.
    evaluate_fn : callable, optional
        ``evaluate_fn(round, weights, {}) -> (loss, {"accuracy": ...})`` on the plain weights of
        the global model ``W_base + dW(averaged factors)``.
    on_fit_config_fn : callable, optional
        ``round -> dict`` of standard client settings (lr, epochs, batch size, seed).
    fraction_fit : float in (0, 1] (default 1.0)
        Fraction of clients sampled per round.
    min_fit_clients : int >= 1 (default 1)
    min_available_clients : int >= 1 (default 1)
    seed : int >= 0 (default 0)
        Source of the shared round seeds and the base seed.
    accept_failures : bool (default True)
    """

    def __init__(self, *, model, initial_parameters, options: MUDOptions | None = None,
                 evaluate_fn: Callable | None = None, on_fit_config_fn: Callable[[int], dict] | None = None,
                 fraction_fit: float = 1.0, min_fit_clients: int = 1, min_available_clients: int = 1,
                 seed: int = 0, accept_failures: bool = True) -> None:
        super().__init__()
        if not 0.0 < fraction_fit <= 1.0:
            raise ValueError(f"fraction_fit must be in (0, 1], got {fraction_fit}")
        if min_fit_clients < 1 or min_available_clients < 1:
            raise ValueError(f"min_fit_clients and min_available_clients must be >= 1, got {min_fit_clients}, "
                             f"{min_available_clients}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.options = options or MUDOptions()
        self.server = MUDServer(model, initial_parameters, self.options, seed=seed)
        self.evaluate_fn = evaluate_fn
        self.on_fit_config_fn = on_fit_config_fn
        self.fraction_fit = fraction_fit
        self.min_fit_clients = min_fit_clients
        self.min_available_clients = min_available_clients
        self.accept_failures = accept_failures
        self._sent: dict[int, int | None] = {}
        self._sync_bytes = 0
        self._push = False

    def __repr__(self) -> str:
        o = self.options
        return f"FedMUDStrategy(decomp={o.decomp}, pattern={o.pattern}, ratio={self.server.plan.ratio:.5f})"

    # ------------------------------------------------------------------ Strategy API
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return ndarrays_to_parameters(self.server.dm.get_payload())

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        by_pid = resolve_partitions(client_manager)
        pid_of = {proxy.cid: pid for pid, proxy in by_pid.items()}
        n = max(int(round(self.fraction_fit * client_manager.num_available())), self.min_fit_clients)
        clients = client_manager.sample(num_clients=n, min_num_clients=max(n, self.min_available_clients)
                                        if self.fraction_fit == 1.0 else n)
        base = dict(self.on_fit_config_fn(server_round)) if self.on_fit_config_fn else {}
        common = self.server.begin_round(server_round)
        self._push = bool(common["fedmud_push"])
        payload_bytes = sum(a.nbytes for a in self.server._round_cache["payload"])
        self._sent, self._sync_bytes = {}, 0
        out = []
        for proxy in sorted(clients, key=lambda p: pid_of[p.cid]):
            pid = pid_of[proxy.cid]
            self._sent[pid] = self.server.client_merges.get(pid)
            arrays, cfg = self.server.instructions_for(pid)
            self._sync_bytes += sum(a.nbytes for a in arrays) - payload_bytes
            out.append((proxy, FitIns(ndarrays_to_parameters(arrays), {**base, **common, **cfg})))
        return out

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures):
        done = {partition_id_of(res) for _, res in results}
        for pid, before in self._sent.items():  # a failed client did not apply this round's sync
            if pid not in done:
                if before is None:
                    self.server.client_merges.pop(pid, None)
                else:
                    self.server.client_merges[pid] = before
        if not results or (failures and not self.accept_failures):
            return None, {}
        self.server.aggregate([(parameters_to_ndarrays(res.parameters), res.num_examples) for _, res in results])
        plan = self.server.plan
        losses = [(res.num_examples, float(res.metrics.get("train_loss", 0.0))) for _, res in results]
        metrics: dict[str, Scalar] = {
            "ratio": float(plan.ratio),
            "rho_layer": float(plan.rho_layer),
            "payload_scalars": int(self.server.payload_scalars()),
            "sync_bytes": int(self._sync_bytes),
            "push": int(self._push),
            "train_loss": sum(n * v for n, v in losses) / max(1, sum(n for n, _ in losses)),
        }
        return ndarrays_to_parameters(self.server.dm.get_payload()), metrics

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        return []

    def aggregate_evaluate(self, server_round: int, results, failures):
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters):
        if self.evaluate_fn is None:
            return None
        return self.evaluate_fn(server_round, self.server.global_weights(), {})

    def global_weights(self) -> list[np.ndarray]:
        """Plain weights of the current global model."""
        return self.server.global_weights()
