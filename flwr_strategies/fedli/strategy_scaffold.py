"""SCAFFOLD (option II) Flower strategy, a FedLi baseline (spec §6).

Wire format: the server sends ``w_t ++ c`` (2L arrays) and each client replies ``w_i ++ dc_i`` with
``dc_i = c_i+ - c_i``. With ``control_state="client"`` (default) the client keeps its control ``c_i`` in
``context.state``. With ``control_state="server"`` the strategy keeps every ``c_i`` in a dict keyed by
partition id and sends ``w_t ++ c ++ c_i`` (3L arrays), for runtimes whose client state does not persist.
Both give the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ..common import resolve_partitions
from .scaffold import scaffold_server_update
from .strategy_base import ClientResult, ServerModelStrategy, _partition_id

__all__ = ["Scaffold"]


class Scaffold(ServerModelStrategy):
    """SCAFFOLD: stochastic controlled averaging (Karimireddy et al., ICML 2020), option II.

    Clients take ``w <- w - eta_l (g_i(w) - c_i + c)`` and update ``c_i+ = c_i - c + (w_t - w_i)/(K eta_l)``;
    the server takes ``w_{t+1} = w_t + eta_g mean_i(w_i - w_t)`` and ``c <- c + (S/N) mean_i(dc_i)``
    (uniform means, as in the paper).

    Parameters
    ----------
    num_clients : int
        N, the total number of clients (for the ``S/N`` factor). Must be >= 1.
    server_lr : float (default: 1.0)
        ``eta_g``. Must be finite and > 0.
    control_state : str (default: "client")
        Where the client controls ``c_i`` live: ``"client"`` (``context.state``) or ``"server"``
        (this strategy, keyed by partition id; costs one extra model copy down per client).
    on_nonfinite : str (default: "raise")
        ``"raise"`` or ``"drop"`` for clients sending NaN/inf.
    **kwargs
        Passed to :class:`flwr.server.strategy.FedAvg` (``initial_parameters`` required).
    """

    def __init__(
        self,
        *,
        num_clients: int,
        server_lr: float = 1.0,
        control_state: str = "client",
        on_nonfinite: str = "raise",
        **kwargs: Any,
    ) -> None:
        if control_state not in ("client", "server"):
            raise ValueError(f'`control_state` must be "client" or "server", got {control_state!r}')
        if int(num_clients) < 1:
            raise ValueError(f"`num_clients` must be >= 1, got {num_clients!r}")
        if not (np.isfinite(server_lr) and server_lr > 0):
            raise ValueError(f"`server_lr` must be finite and > 0, got {server_lr!r}")
        super().__init__(weighting="uniform", on_nonfinite=on_nonfinite, **kwargs)
        self.num_clients = int(num_clients)
        self.server_lr = float(server_lr)
        self.c_global: list[np.ndarray] = [np.zeros_like(a) for a in self.current]
        self.participation: dict[int, int] = {}
        self.control_state = control_state
        self.client_controls: dict[int, list[np.ndarray]] = {}

    def __repr__(self) -> str:
        return f"Scaffold(num_clients={self.num_clients}, server_lr={self.server_lr}, control_state={self.control_state!r})"

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        instructions = super().configure_fit(server_round, parameters, client_manager)
        base = parameters_to_ndarrays(parameters) + self.c_global
        if self.control_state == "client":
            payload = ndarrays_to_parameters(base)
            return [(proxy, FitIns(payload, ins.config)) for proxy, ins in instructions]
        pid_of = {proxy.cid: pid for pid, proxy in resolve_partitions(client_manager).items()}
        out = []
        for proxy, ins in instructions:
            c_i = self.client_controls.get(pid_of[proxy.cid], [np.zeros_like(c) for c in self.c_global])
            out.append((proxy, FitIns(ndarrays_to_parameters(base + c_i), ins.config)))
        return out

    def decode_result(self, res: FitRes, index: int) -> ClientResult:
        arrays = parameters_to_ndarrays(res.parameters)
        n_layers = len(self.current)
        if len(arrays) != 2 * n_layers:
            raise ValueError(
                f"SCAFFOLD client sent {len(arrays)} arrays; expected {2 * n_layers} (weights ++ control update)"
            )
        r = ClientResult(_partition_id(res, index), arrays, int(res.num_examples), dict(res.metrics or {}))
        return r

    def server_update(self, server_round: int, results: list[ClientResult]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        n_layers = len(self.current)
        models = [r.arrays[:n_layers] for r in results]
        dcs = [r.arrays[n_layers:] for r in results]
        new_w, new_c = scaffold_server_update(self.current, self.c_global, models, dcs, self.num_clients, self.server_lr)
        self.c_global = new_c
        for r, dc in zip(results, dcs):
            self.participation[r.partition_id] = self.participation.get(r.partition_id, 0) + 1
            if self.control_state == "server":
                old = self.client_controls.get(r.partition_id, [np.zeros_like(c) for c in self.c_global])
                self.client_controls[r.partition_id] = [
                    (np.asarray(o, np.float64) + np.asarray(d, np.float64)).astype(np.asarray(o).dtype) for o, d in zip(old, dc)
                ]
        c_norm = float(np.sqrt(sum(float(np.sum(np.asarray(c, np.float64) ** 2)) for c in new_c)))
        return new_w, {"control_norm": c_norm}
