"""Client pieces of DO-ADP's baselines (DPDO, DP-DDA, CPGT, D-mSGD): one agent each, on the user's model and data.

Pieces for your own ``ClientApp`` (any ``torch.nn.Module`` without buffers, any data
:class:`~flwr_strategies.clients.doadp.IndexedData` reads: a ``DataLoader``, a ``Dataset``, a list
of ``(x, y)`` batches), shaped like :class:`~flwr_strategies.clients.doadp.DOADPAgent`::

    agent = DPDOAgent(msg.content["arrays"].to_numpy_ndarrays(), message_config(msg), context.state,
                      node_config=context.node_config, budget=ClientBudget(epsilon=1.0, rounds=10))
    arrays, metrics = agent.train(model, IndexedData(trainloader, keys=("img", "label")))
    agent.save(context.state)

:class:`DPDOAgent`, :class:`DPDDAAgent`, :class:`CPGTAgent` and :class:`DMSGDAgent` (the
non-private D-mSGD: ``DOADPAgent`` without noise or budget). The ready-made clients
(:class:`DPDOClient`, :class:`DPDDAClient`, :class:`CPGTClient`) run the same agents on the
project's ``ClientSetup``.

Each runs the per-agent function of :mod:`flwr_strategies.doadp.baselines` and keeps its private
variables in ``context.state``, committed only once the reply exists; its randomness, its refusal of a
seed from the server and its consent to private-model evaluation are DO-ADP's
(:mod:`flwr_strategies.clients.doadp`).

Each agent checks the noise the server asks for against its own
:class:`~flwr_strategies.clients.doadp.ClientBudget` (as DO-ADP's) before any work, and refuses a clip
above its own, a round past its rounds or less noise than its budget needs, with the accountant the
server calibrates with, on its own q records, naming both values: DP-DDA's Gaussian sigma
(:func:`~flwr_strategies.clients.doadp.check_gaussian_noise`), DPDO's and CPGT's Laplace scale b0
(:meth:`BaselineAgent.check_laplace`: pure DP, amplified by the batch draw b/q; CPGT's heuristic doubles it
for its two variables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.common import Scalar

from flwr_strategies.clients.doadp import (
    ClientBudget,
    DOADPAgent,
    DOADPClient,
    IndexedData,
    _NodeAgent,
    check_gaussian_noise,
    private_generator,
)
from flwr_strategies.doadp.baselines import BatchGrad, cpgt_round, dpdda_round, dpdo_round, laplace_schedule
from flwr_strategies.privacy.laplace import calibrate_laplace_b0, pure_dp_epsilon

__all__ = [
    "BaselineAgent", "DPDOAgent", "DPDDAAgent", "CPGTAgent", "DMSGDAgent", "ClientBudget", "IndexedData",
    "DPDOClient", "DPDDAClient", "CPGTClient",
]


class BaselineAgent(_NodeAgent):
    """One baseline agent's round on your own model and data (the shape of
    :class:`~flwr_strategies.clients.doadp.DOADPAgent`); the base of :class:`DPDOAgent`,
    :class:`DPDDAAgent` and :class:`CPGTAgent`, which your ``ClientApp`` uses as the module's example
    (:meth:`save` commits only once the reply exists).

    Parameters
    ----------
    arrays : list[np.ndarray]
        What the server sent this agent (the mixed broadcasts, and x0 while the agent has no state).
    config : dict
        The round's config (``t``, ``bl_*`` and the method's keys).
    state : RecordDict | None (default: None)
        ``context.state``: the agent's private variables persist there between rounds.
    node_config, client_seed, budget, allow_private_eval
        As :class:`~flwr_strategies.clients.doadp.DOADPAgent` (defaults None: the node's own, from the
        ``doadp-*`` keys of ``node_config``, then ``state``); without a budget the agent refuses to train.
    """

    key = "baseline"
    label = "baseline"

    def __init__(self, arrays: list[np.ndarray], config: dict[str, Scalar], state=None, *,
                 node_config: Mapping[str, Any] | None = None, client_seed: int | None = None,
                 budget: ClientBudget | None = None, allow_private_eval: bool | None = None) -> None:
        self._node_settings(config, state, node_config, client_seed, budget, allow_private_eval)
        self.arrays = [np.asarray(a, np.float64) for a in arrays]
        self.config = dict(config)
        self.stored = state[self.key].to_numpy_ndarrays() if state is not None and self.key in state else None
        clip = float(config["bl_clip"])
        if clip > self.budget.clip:
            raise ValueError(f"{self.label} client refuses the round: the server's clip={clip:g} is larger than the "
                             f"client's own clip={self.budget.clip:g}")

    def train(self, model: torch.nn.Module, data: Any, loss_fn: Callable = torch.nn.functional.cross_entropy
              ) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """Run the round on ``model`` (no buffers) and ``data`` (anything
        :class:`~flwr_strategies.clients.doadp.IndexedData` reads); returns the reply arrays (plus
        the private model in rounds of ``evaluate_private``, with consent) and metrics."""
        if len(list(model.buffers())):
            raise ValueError(f"{self.key} needs a model without buffers")
        data = data if isinstance(data, IndexedData) else IndexedData(data)
        self.check_noise(sum(p.numel() for p in model.parameters()), len(data))
        arrays, x, self.next_state, metrics = self.round(self._grad_fn(model, data, loss_fn), len(data),
                                                         private_generator(self.client_seed, self.t))
        if self.report:
            arrays = arrays + [x.copy()]
        return arrays, metrics

    def round(self, grad_fn: Callable, q: int, rng: np.random.Generator):
        """The method's round: ``(reply arrays, private model, next state, metrics)``."""
        raise NotImplementedError

    def check_noise(self, d: int, q: int) -> None:
        """Refuse noise below the client's budget (per method), before any work."""
        raise NotImplementedError

    def batch(self) -> BatchGrad:
        c = self.config
        return BatchGrad(int(c["bl_batch_size"]), float(c["bl_clip"]), str(c["bl_clip_mode"]), str(c["bl_sampling"]))

    def check_laplace(self, d: int, q: int, b0: float, lr: float, rs: float, rn: float, delay: int,
                      halves: int) -> None:
        """Refuse a Laplace scale ``b0`` whose pure-DP epsilon (``halves`` variables, each released with
        it) over the client's rounds exceeds its budget, naming both b0: the releases and sensitivities
        of :func:`~flwr_strategies.doadp.baselines.laplace_schedule` (``delay``), as the servers
        calibrate them, on ``d`` parameters and the client's ``q`` records."""
        b = int(self.config["bl_batch_size"])
        sensitivities, decays = laplace_schedule(float(self.config["bl_clip"]), d, lr, rs, rn, b, self.budget.rounds,
                                                 delay)
        rate = min(1.0, b / q)
        eps = halves * pure_dp_epsilon(sensitivities, b0 * decays, rate) if len(sensitivities) else 0.0
        if eps > self.budget.epsilon * (1 + 1e-9):
            own = calibrate_laplace_b0(self.budget.epsilon / halves, sensitivities, decays, rate)
            raise ValueError(
                f"{self.label} client refuses the round: the server's Laplace scale b0={b0:.6g} gives epsilon={eps:.4g} "
                f"over the client's {self.budget.rounds} rounds on its {q} records, above its own "
                f"epsilon={self.budget.epsilon:g}; its own budget needs b0 >= {own:.6g}"
            )


class DPDOAgent(BaselineAgent):
    """DPDO agent (Huang et al. 2015): completes the previous iteration from the mixed broadcasts
    ``arrays[0]`` and broadcasts ``x + Laplace(b0 rn^t)`` (its first round starts from x0 =
    ``arrays[0]``, sent with ``bl_init``). Parameters as :class:`BaselineAgent`."""

    key = "dpdo"
    label = "DPDO"

    def check_noise(self, d: int, q: int) -> None:
        c = self.config  # round t releases the broadcast of t - 1 data-dependent steps
        self.check_laplace(d, q, float(c["dpdo_b0"]), float(c["dpdo_c"]), float(c["dpdo_rs"]), float(c["dpdo_rn"]), 1, 1)

    def round(self, grad_fn, q, rng):
        c = self.config
        if self.stored is None:
            if not int(c.get("bl_init", 0)):
                raise ValueError("DPDO agent has no state and the server sent no x0")
            x, z = self.arrays[0].copy(), None
        else:
            x, z = self.stored[0], self.arrays[0]
        x, y = dpdo_round(x, z, self.t, c=float(c["dpdo_c"]), rs=float(c["dpdo_rs"]), b0=float(c["dpdo_b0"]),
                          rn=float(c["dpdo_rn"]), rng=rng, grad_fn=grad_fn, q=q, bg=self.batch())
        return [y], x, [x], {}


class DPDDAAgent(BaselineAgent):
    """DP-DDA agent (Liu et al. 2024): samples itself with probability p_s, adds its noisy gradient
    to the mixed dual variable ``arrays[0]``, broadcasts z and moves to
    ``x = -z / ((t+1) reg + beta0 sqrt(t+1))`` (x0 = ``arrays[1]`` while it has no state).
    Parameters as :class:`BaselineAgent`."""

    key = "dpdda"
    label = "DP-DDA"

    def check_noise(self, d: int, q: int) -> None:
        c = self.config
        check_gaussian_noise(self.budget, float(c["dpdda_sigma"]), float(c["bl_clip"]), int(c["bl_batch_size"]), q,
                             str(c["bl_sampling"]), self.label)

    def round(self, grad_fn, q, rng):
        c = self.config
        if self.stored is None:
            if len(self.arrays) < 2:
                raise ValueError("DP-DDA agent has no state and the server sent no x0")
            x = self.arrays[1].copy()
        else:
            x = self.stored[0]
        sigma = float(c["dpdda_sigma"])
        if not sigma > 0:
            raise ValueError(f"DP-DDA client refuses a round without noise (sigma={sigma})")
        x_new, z, sampled = dpdda_round(x, self.arrays[0], self.t, p_s=float(c["dpdda_p_s"]), sigma=sigma,
                                        reg=float(c["dpdda_reg"]), beta0=float(c["dpdda_beta0"]), rng=rng,
                                        grad_fn=grad_fn, q=q, bg=self.batch())
        return [z], x_new, [x_new], {"dpdda_sampled": int(sampled)}


class CPGTAgent(BaselineAgent):
    """CPGT agent (Xie et al. 2023): completes the previous iteration (model and tracker) from
    ``arrays``, then sends the Top-k compressed, Laplace-perturbed differences of both to its
    references. Parameters as :class:`BaselineAgent`."""

    key = "cpgt"
    label = "CPGT"

    def check_noise(self, d: int, q: int) -> None:
        c = self.config
        self.check_laplace(d, q, float(c["cpgt_b0"]), float(c["cpgt_lr"]), float(c["cpgt_rs"]), float(c["cpgt_rn"]), 0, 2)

    def round(self, grad_fn, q, rng):
        c, arrays = self.config, self.arrays
        if self.stored is None or int(c.get("bl_init", 0)):
            if len(arrays) != 3:
                raise ValueError("CPGT agent has no state and the server sent no x0")
            x, y, completion = arrays[0].copy(), None, None
            h_x, h_y = arrays[1], arrays[2]
        else:
            x, y = self.stored
            completion = tuple(arrays[:4])
            h_x, h_y = arrays[4], arrays[5]
        x, y, (ix, vx), (iy, vy) = cpgt_round(
            x, y, completion, h_x, h_y, self.t, k=int(c["cpgt_k"]), lr=float(c["cpgt_lr"]), rs=float(c["cpgt_rs"]),
            g_cons=float(c["cpgt_g_cons"]), b0=float(c["cpgt_b0"]), rn=float(c["cpgt_rn"]), rng=rng, grad_fn=grad_fn,
            q=q, bg=self.batch(), msg_dtype="float64")
        return [ix, vx, iy, vy], x, [x, y], {}


class DMSGDAgent(DOADPAgent):
    """The non-private D-mSGD agent (DO-ADP's network with p = 1, k = d, no noise, no clipping):
    :class:`~flwr_strategies.clients.doadp.DOADPAgent` that accepts only the ``DMSGD`` server's
    non-private rounds and needs no budget. Arguments as ``DOADPAgent`` (without ``budget`` and
    ``require_private``)."""

    def __init__(self, arrays: list[np.ndarray], config: dict[str, Scalar], state=None, *,
                 node_config: Mapping[str, Any] | None = None, client_seed: int | None = None,
                 allow_private_eval: bool | None = None) -> None:
        super().__init__(arrays, config, state, node_config=node_config, client_seed=client_seed,
                         require_private=False, allow_private_eval=allow_private_eval)


class _BaselineClient(DOADPClient):
    """The ready-made agent of a baseline (legacy ``NumPyClient``; the Message API runs it through
    :func:`flwr_strategies.clients.app.numpy_client_app`): :class:`~flwr_strategies.clients.doadp.DOADPClient`
    running its :attr:`agent` on ``setup``'s model and training data, the agent's variables in
    ``setup.state``. Keyword arguments as :class:`BaselineAgent` (None: read from
    ``setup.node_config``/``setup.state``)."""

    agent: type = BaselineAgent

    def __init__(self, setup, params: dict[str, Any] | None = None, *, client_seed: int | None = None,
                 budget: ClientBudget | None = None, loss_fn: Callable = torch.nn.functional.cross_entropy,
                 allow_private_eval: bool | None = None) -> None:
        super().__init__(setup, params, client_seed=client_seed, budget=budget, loss_fn=loss_fn,
                         allow_private_eval=allow_private_eval)
        self.agent_options = {}


class DPDOClient(_BaselineClient):
    """The ready-made DPDO client (:class:`DPDOAgent`)."""

    agent = DPDOAgent


class DPDDAClient(_BaselineClient):
    """The ready-made DP-DDA client (:class:`DPDDAAgent`)."""

    agent = DPDDAAgent


class CPGTClient(_BaselineClient):
    """The ready-made CPGT client (:class:`CPGTAgent`)."""

    agent = CPGTAgent
