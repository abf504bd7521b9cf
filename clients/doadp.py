"""DO-ADP client (legacy ``NumPyClient``): one agent of Algorithm 1 (Huo et al.).

The agent's private model x_i, momentum m_i and own public copy xhat_i persist in
``context.state`` (``ClientSetup.state``) as one ``ArrayRecord`` (flat float64 vectors). Each round it
receives its consensus term (and, in round 1, the common x_0) plus ``config["active"]`` and
``config["t"]``, runs :func:`flwr_strategies.doadp.algorithm.agent_step` and returns its Top-k
message ``[indices int64, values]`` when active, two empty arrays when inactive, and additionally
its private model when ``config["report_model"]`` is set (evaluation only).

Randomness: the sample choice and the noise come from the seeded stream
``flwr_strategies.doadp.rng.agent_rng(seed, t, partition_id)`` (no global RNG state), so the
Flower path reproduces the reference simulator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import ArrayRecord, Scalar

from flwr_strategies.clients.base import TorchClient
from flwr_strategies.doadp.algorithm import AgentState, DOADPParams, agent_step, index_dtype_for
from flwr_strategies.doadp.torch_oracle import TorchGradOracle

__all__ = ["DOADPClient"]

_STATE_KEY = "doadp"


def params_from_config(config: dict[str, Scalar]) -> DOADPParams:
    """DOADPParams from the ``doadp_*`` keys the strategy sends every round (spec Sec. 10)."""
    G = float(config["doadp_G"])
    return DOADPParams(
        alpha=float(config["doadp_alpha"]), gamma=float(config["doadp_gamma"]), beta=float(config["doadp_beta"]),
        p=float(config["doadp_p"]), k=int(config["doadp_k"]), sigma=float(config["doadp_sigma"]),
        G=None if G < 0 else G, clip_mode=str(config["doadp_clip_mode"]),
        batch_size=int(config["doadp_batch_size"]), msg_dtype=str(config["doadp_msg_dtype"]),
        seed=int(config["doadp_seed"]), allow_low_p=bool(int(config["doadp_allow_low_p"])),
    )


class DOADPClient(TorchClient):
    """One DO-ADP agent.

    Parameters (``params``)
    -----------------------
    public_copy : str (default "zero")
        Initial own public copy, as the strategy's.
    """

    def __init__(self, setup, params: dict[str, Any] | None = None, grad_oracle=None) -> None:
        super().__init__(setup, params)
        self.public_copy = str(self.params.get("public_copy", "zero"))
        self.oracle = grad_oracle or TorchGradOracle(self.model, setup.train_data.x, setup.train_data.y)

    def _load(self, arrays: list[np.ndarray]) -> AgentState:
        st = self.setup.state
        if st is not None and _STATE_KEY in st:
            x, m, xhat = st[_STATE_KEY].to_numpy_ndarrays()
            return AgentState(x=x, m=m, xhat=xhat)
        if len(arrays) < 2:
            raise RuntimeError(
                f"DO-ADP client {self.partition_id}: no state and no x0 received (state lost between rounds?)"
            )
        return AgentState.initial(arrays[1], self.public_copy)

    def _save(self, s: AgentState) -> None:
        if self.setup.state is not None:
            self.setup.state[_STATE_KEY] = ArrayRecord([s.x, s.m, s.xhat])

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        cons = np.asarray(parameters[0], dtype=np.float64)
        state = self._load(parameters)
        if state.x.shape[0] != self.oracle.d:
            raise ValueError(
                f"DO-ADP needs a model without buffers: flat size {state.x.shape[0]} != parameters {self.oracle.d}"
            )
        self.doadp = params_from_config(config)
        t = int(config["t"])
        active = bool(int(config["active"]))
        res = agent_step(state, cons, active, self.doadp, self.oracle.per_sample_grads, self.oracle.q, t,
                         self.partition_id)
        self._save(state)
        if active:
            out = [res.indices.astype(index_dtype_for(self.oracle.d)), res.values.astype(self.doadp.msg_dtype)]
            metrics = {}
        else:
            out = [np.empty(0, dtype=np.int64), np.empty(0, dtype=self.doadp.msg_dtype)]
            metrics = {}
        if int(config.get("report_model", 0)):
            out.append(state.x.copy())
        return out, self.num_train(), {**self.base_metrics(), **metrics}
