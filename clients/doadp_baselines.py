"""Clients of DO-ADP's baselines (DPDO, DP-DDA, CPGT): one agent each, on the user's model and data.

Each runs the per-agent function of :mod:`flwr_strategies.doadp.baselines` with the agent's private
generator (:func:`flwr_strategies.clients.doadp.private_generator`: OS entropy, or a client-side seed
from ``node_config``/``context.state``), keeps its private variables in ``context.state`` and commits
them only once the reply exists. The server sends no seed (a round whose config carries one is
refused), and an agent sends its private model (``evaluate_private``) only with its node's consent
(``doadp-allow-private-eval``), as DO-ADP's (:mod:`flwr_strategies.clients.doadp`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.common import Scalar

from flwr_strategies.clients.base import TorchClient
from flwr_strategies.clients.doadp import (
    IndexedData,
    check_round_config,
    client_seed_of,
    load_flat_parameters,
    per_sample_gradients,
    private_eval_allowed,
    private_generator,
)
from flwr_strategies.doadp.baselines import BatchGrad, cpgt_round, dpdda_round, dpdo_round
from flwr_strategies.doadp.rng import check_client_seed

__all__ = ["DPDOClient", "DPDDAClient", "CPGTClient", "build_dpdo_client", "build_dpdda_client", "build_cpgt_client"]


class _BaselineClient(TorchClient):
    key = "baseline"

    def __init__(self, setup, params: dict[str, Any] | None = None, *, client_seed: int | None = None,
                 loss_fn: Callable = torch.nn.functional.cross_entropy, allow_private_eval: bool | None = None) -> None:
        super().__init__(setup, params)
        node_config = getattr(setup, "node_config", None)
        if client_seed is None:
            client_seed = client_seed_of(setup.state, node_config)
        self.client_seed = check_client_seed(client_seed)
        if allow_private_eval is None:
            allow_private_eval = private_eval_allowed(setup.state, node_config)
        self.allow_private_eval = bool(allow_private_eval)
        self.loss_fn = loss_fn
        self._data: IndexedData | None = None

    @property
    def data(self) -> IndexedData:
        if self._data is None:
            self._data = IndexedData(self.setup.train_data)
        return self._data

    def num_train(self) -> int:
        return len(self.data)

    def grad_fn(self):
        model, data, loss_fn = self.model, self.data, self.loss_fn
        if len(list(model.buffers())):
            raise ValueError(f"{self.key} needs a model without buffers")

        def fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
            xb, yb = data.batch(idx)
            dev = next(model.parameters()).device
            load_flat_parameters(model, x)
            return per_sample_gradients(model, loss_fn, xb.to(dev), yb.to(dev))

        return fn

    @staticmethod
    def batch(config: dict[str, Scalar]) -> BatchGrad:
        return BatchGrad(int(config["bl_batch_size"]), float(config["bl_clip"]), str(config["bl_clip_mode"]),
                         str(config["bl_sampling"]))

    def load(self) -> list[np.ndarray] | None:
        st = self.setup.state
        return st[self.key].to_numpy_ndarrays() if st is not None and self.key in st else None

    def save(self, arrays: list[np.ndarray]) -> None:
        if self.setup.state is not None:
            self.setup.state[self.key] = ArrayRecord([np.asarray(a) for a in arrays])

    def check(self, config: dict[str, Scalar]) -> None:
        """Refuse a seed from the server and an unconsented private-model request (before any work)."""
        check_round_config(config, self.allow_private_eval)

    def reply(self, arrays: list[np.ndarray], x: np.ndarray, config: dict[str, Scalar], metrics: dict | None = None):
        if check_round_config(config, self.allow_private_eval):
            arrays = arrays + [x.copy()]
        out = {**self.base_metrics(), "doadp_client_seeded": int(self.client_seed is not None), **(metrics or {})}
        return arrays, self.num_train(), out

    def rng(self, config: dict[str, Scalar]) -> np.random.Generator:
        return private_generator(self.client_seed, int(config["t"]))


class DPDOClient(_BaselineClient):
    """DPDO agent: completes the previous iteration from the mixed broadcasts and broadcasts
    ``x + Laplace(b0 rn^t)``."""

    key = "dpdo"

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        self.check(config)
        t = int(config["t"])
        state = self.load()
        if state is None:
            if not int(config.get("bl_init", 0)):
                raise ValueError("DPDO agent has no state and the server sent no x0")
            x, z = np.asarray(parameters[0], np.float64).copy(), None
        else:
            x, z = state[0], np.asarray(parameters[0], np.float64)
        x, y = dpdo_round(x, z, t, c=float(config["dpdo_c"]), rs=float(config["dpdo_rs"]),
                          b0=float(config["dpdo_b0"]), rn=float(config["dpdo_rn"]), rng=self.rng(config),
                          grad_fn=self.grad_fn(), q=self.num_train(), bg=self.batch(config))
        out = self.reply([y], x, config)
        self.save([x])
        return out


class DPDDAClient(_BaselineClient):
    """DP-DDA agent: samples itself with probability p_s, adds its noisy gradient to the mixed dual
    variable, broadcasts z and moves to ``x = -z / ((t+1) reg + beta0 sqrt(t+1))``."""

    key = "dpdda"

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        self.check(config)
        t = int(config["t"])
        state = self.load()
        if state is None:
            if len(parameters) < 2:
                raise ValueError("DP-DDA agent has no state and the server sent no x0")
            x = np.asarray(parameters[1], np.float64).copy()
        else:
            x = state[0]
        sigma = float(config["dpdda_sigma"])
        if not sigma > 0:
            raise ValueError(f"DP-DDA client refuses a round without noise (sigma={sigma})")
        x_new, z, sampled = dpdda_round(x, np.asarray(parameters[0], np.float64), t, p_s=float(config["dpdda_p_s"]),
                                        sigma=sigma, reg=float(config["dpdda_reg"]),
                                        beta0=float(config["dpdda_beta0"]), rng=self.rng(config),
                                        grad_fn=self.grad_fn(), q=self.num_train(), bg=self.batch(config))
        out = self.reply([z], x_new, config, {"dpdda_sampled": int(sampled)})
        self.save([x_new])
        return out


class CPGTClient(_BaselineClient):
    """CPGT agent: completes the previous iteration (model and tracker), then sends the Top-k
    compressed, Laplace-perturbed differences of both to its references."""

    key = "cpgt"

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        self.check(config)
        t = int(config["t"])
        state = self.load()
        arrays = [np.asarray(a, np.float64) for a in parameters]
        if state is None or int(config.get("bl_init", 0)):
            if len(arrays) != 3:
                raise ValueError("CPGT agent has no state and the server sent no x0")
            x, y, completion = arrays[0].copy(), None, None
            h_x, h_y = arrays[1], arrays[2]
        else:
            x, y = state
            completion = tuple(arrays[:4])
            h_x, h_y = arrays[4], arrays[5]
        msg_dtype = "float64"
        x, y, (ix, vx), (iy, vy) = cpgt_round(
            x, y, completion, h_x, h_y, t, k=int(config["cpgt_k"]), lr=float(config["cpgt_lr"]),
            rs=float(config["cpgt_rs"]), g_cons=float(config["cpgt_g_cons"]), b0=float(config["cpgt_b0"]),
            rn=float(config["cpgt_rn"]), rng=self.rng(config), grad_fn=self.grad_fn(), q=self.num_train(),
            bg=self.batch(config), msg_dtype=msg_dtype)
        out = self.reply([ix, vx, iy, vy], x, config)
        self.save([x, y])
        return out


def build_dpdo_client(setup, params: dict[str, Any]) -> DPDOClient:
    """Registry factory of the DPDO client."""
    return DPDOClient(setup, params)


def build_dpdda_client(setup, params: dict[str, Any]) -> DPDDAClient:
    """Registry factory of the DP-DDA client."""
    return DPDDAClient(setup, params)


def build_cpgt_client(setup, params: dict[str, Any]) -> CPGTClient:
    """Registry factory of the CPGT client."""
    return CPGTClient(setup, params)
