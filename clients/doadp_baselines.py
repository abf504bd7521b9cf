"""Clients of DO-ADP's baselines (DPDO, DP-DDA, CPGT): one agent each, on the user's model and data.

Each runs the per-agent function of :mod:`flwr_strategies.doadp.baselines` with the agent's private
generator (:func:`flwr_strategies.clients.doadp.private_generator`: OS entropy, or a client-side seed
from ``node_config``/``context.state``), keeps its private variables in ``context.state`` and commits
them only once the reply exists. The server sends no seed (a round whose config carries one is
refused), and an agent sends its private model (``evaluate_private``) only with its node's consent
(``doadp-allow-private-eval``), as DO-ADP's (:mod:`flwr_strategies.clients.doadp`).

Each agent checks the noise the server asks for against its own
:class:`~flwr_strategies.clients.doadp.ClientBudget` (from ``budget=``, the node config or
``context.state``, as DO-ADP's) before any work, and refuses a clip above its own or a round past
its rounds: DP-DDA's Gaussian noise with the accountant the server calibrates with
(:func:`~flwr_strategies.clients.doadp.check_gaussian_noise`); DPDO's and CPGT's Laplace schedule
(``b0 rn^t`` against the sensitivity ``2 G sqrt(d) lr rs^t / b``) with the pure-DP sum the server
calibrates with (:func:`~flwr_strategies.privacy.laplace.pure_dp_epsilon`, amplified by the batch draw
b/q on the client's own q; CPGT's heuristic doubles it for its two variables), refusing a ``b0``
below the one its budget needs, naming both.
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
    ClientBudget,
    IndexedData,
    _ledger,
    _no_budget_error,
    _save_ledger,
    check_gaussian_noise,
    check_rounds_left,
    check_round_config,
    client_budget_of,
    client_seed_of,
    load_flat_parameters,
    per_sample_gradients,
    private_eval_allowed,
    private_generator,
)
from flwr_strategies.doadp.baselines import BatchGrad, cpgt_round, dpdda_round, dpdo_round
from flwr_strategies.doadp.rng import check_client_seed
from flwr_strategies.privacy.laplace import calibrate_laplace_b0, pure_dp_epsilon

__all__ = ["DPDOClient", "DPDDAClient", "CPGTClient", "build_dpdo_client", "build_dpdda_client", "build_cpgt_client"]


class _BaselineClient(TorchClient):
    key = "baseline"

    #: the method's name in refusals
    label = "baseline"

    def __init__(self, setup, params: dict[str, Any] | None = None, *, client_seed: int | None = None,
                 budget: ClientBudget | None = None, loss_fn: Callable = torch.nn.functional.cross_entropy,
                 allow_private_eval: bool | None = None) -> None:
        super().__init__(setup, params)
        node_config = getattr(setup, "node_config", None)
        if client_seed is None:
            client_seed = client_seed_of(setup.state, node_config)
        self.client_seed = check_client_seed(client_seed)
        self.budget = budget if budget is not None else client_budget_of(setup.state, node_config)
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
        """Refuse a seed from the server, an unconsented private-model request, a round past the
        client's rounds and noise below its budget (before any work)."""
        check_round_config(config, self.allow_private_eval)
        if self.budget is None:
            raise _no_budget_error(self.label)
        check_rounds_left(self.budget, int(config["t"]), _ledger(self.setup.state)["rounds"], self.label)
        clip = float(config["bl_clip"])
        if clip > self.budget.clip:
            raise ValueError(f"{self.label} client refuses the round: the server's clip={clip:g} is larger than the "
                             f"client's own clip={self.budget.clip:g}")
        self.check_noise(config)

    def check_noise(self, config: dict[str, Scalar]) -> None:
        """Refuse noise below the client's budget (per method)."""
        raise NotImplementedError

    def check_laplace(self, config: dict[str, Scalar], b0: float, lr: float, rs: float, rn: float, t: np.ndarray,
                      shift: int, halves: int) -> None:
        """Refuse a Laplace schedule ``b0 rn^(t + shift)`` whose pure-DP epsilon (``halves`` variables,
        each released with it) over the client's rounds exceeds its budget, naming both b0. ``t`` are
        the exponents of the step decay ``rs^t`` of the releases the client's rounds make; the
        sensitivity is the servers' ``2 G sqrt(d) lr rs^t / b``."""
        b = int(config["bl_batch_size"])
        d = sum(p.numel() for p in self.model.parameters())
        sensitivities = 2.0 * float(config["bl_clip"]) * np.sqrt(d) * lr * rs**t / b
        decays = rn ** (t + shift)
        rate = min(1.0, b / self.num_train())
        eps = halves * pure_dp_epsilon(sensitivities, b0 * decays, rate) if len(sensitivities) else 0.0
        if eps > self.budget.epsilon * (1 + 1e-9):
            own = calibrate_laplace_b0(self.budget.epsilon / halves, sensitivities, decays, rate)
            raise ValueError(
                f"{self.label} client refuses the round: the server's Laplace scale b0={b0:.6g} gives epsilon={eps:.4g} "
                f"over the client's {self.budget.rounds} rounds on its {self.num_train()} records, above its own "
                f"epsilon={self.budget.epsilon:g}; its own budget needs b0 >= {own:.6g}"
            )

    def reply(self, arrays: list[np.ndarray], x: np.ndarray, config: dict[str, Scalar], metrics: dict | None = None):
        if check_round_config(config, self.allow_private_eval):
            arrays = arrays + [x.copy()]
        return arrays, self.num_train(), {**self.base_metrics(), **(metrics or {})}

    def commit(self, arrays: list[np.ndarray]) -> None:
        """Save the agent's variables and count the round (once the reply exists)."""
        self.save(arrays)
        if self.setup.state is not None:
            ledger = _ledger(self.setup.state)
            _save_ledger(self.setup.state, {**ledger, "rounds": ledger["rounds"] + 1})

    def rng(self, config: dict[str, Scalar]) -> np.random.Generator:
        return private_generator(self.client_seed, int(config["t"]))


class DPDOClient(_BaselineClient):
    """DPDO agent: completes the previous iteration from the mixed broadcasts and broadcasts
    ``x + Laplace(b0 rn^t)``."""

    key = "dpdo"
    label = "DPDO"

    def check_noise(self, config: dict[str, Scalar]) -> None:
        # round t releases the broadcast of t - 1 data-dependent steps: rs^(t-1) against rn^t, t = 1..rounds-1
        self.check_laplace(config, float(config["dpdo_b0"]), float(config["dpdo_c"]), float(config["dpdo_rs"]),
                           float(config["dpdo_rn"]), np.arange(self.budget.rounds - 1, dtype=np.float64), 1, 1)

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
        self.commit([x])
        return out


class DPDDAClient(_BaselineClient):
    """DP-DDA agent: samples itself with probability p_s, adds its noisy gradient to the mixed dual
    variable, broadcasts z and moves to ``x = -z / ((t+1) reg + beta0 sqrt(t+1))``."""

    key = "dpdda"
    label = "DP-DDA"

    def check_noise(self, config: dict[str, Scalar]) -> None:
        check_gaussian_noise(self.budget, float(config["dpdda_sigma"]), float(config["bl_clip"]),
                             int(config["bl_batch_size"]), self.num_train(), str(config["bl_sampling"]), self.label)

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
        self.commit([x_new])
        return out


class CPGTClient(_BaselineClient):
    """CPGT agent: completes the previous iteration (model and tracker), then sends the Top-k
    compressed, Laplace-perturbed differences of both to its references."""

    key = "cpgt"
    label = "CPGT"

    def check_noise(self, config: dict[str, Scalar]) -> None:
        self.check_laplace(config, float(config["cpgt_b0"]), float(config["cpgt_lr"]), float(config["cpgt_rs"]),
                           float(config["cpgt_rn"]), np.arange(self.budget.rounds, dtype=np.float64), 0, 2)

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
        self.commit([x, y])
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
