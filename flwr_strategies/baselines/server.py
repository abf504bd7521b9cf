"""Server cores of FedAvg, FedProx and FedAdam (framework-neutral; NumPy in, NumPy out).

The arithmetic is Flower's legacy strategies' (``aggregate_inplace``; FedAdam's moment updates),
so runs give the same numbers as Flower's own ``FedAvg``/``FedProx``/``FedAdam`` on the same
clients and sampling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.aggregation import fedavg_average, weighted_mean_metrics
from ..core.messages import Instruction, Reply
from ..core.server import ServerCore, check_model_arrays
from ..core.validation import ReplyError, require_finite
from .config import FedAdamConfig, FedAvgConfig, FedProxConfig

__all__ = ["FedAvgServer", "FedProxServer", "FedAdamServer"]

#: Stores what a server step computed besides the new model (it cannot fail).
Commit = Callable[[], None]


def no_commit() -> None:
    """The commit of a server step that keeps no state besides the model."""
    return None


class FedAvgServer(ServerCore):
    """FedAvg (McMahan et al., AISTATS 2017): the example-weighted average of the returned models.

    Parameters
    ----------
    initial_arrays : list[np.ndarray]
        Initial global model.
    config : FedAvgConfig | FedProxConfig | FedAdamConfig | None (default: None)
        The method's hyperparameters, an instance of :attr:`config_cls` (None: its defaults).
    **kwargs
        :class:`~flwr_strategies.core.server.ServerCore` arguments (num_partitions,
        fraction_train, min_train, seed, on_train_config).
    """

    #: every reply enters the average with a positive weight, and the new model is checked finite
    aggregate_reveals_nonfinite = True
    #: The method's config dataclass (``config=None``: its defaults).
    config_cls: type = FedAvgConfig
    #: ``"num_examples"`` (``p_i = n_i / sum_j n_j``, Flower's FedAvg) or ``"uniform"``.
    weighting: str = "num_examples"

    def __init__(self, initial_arrays, *, config: Any = None, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self.config = config if config is not None else self.config_cls()
        self.current = [a.copy() for a in self.initial_arrays]

    def client_config(self) -> dict[str, Any]:
        """Method constants added to every client config (none for FedAvg)."""
        return {}

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        cfg = {**self.base_config(server_round), **self.client_config()}
        return [Instruction(pid, self.current, dict(cfg)) for pid in partition_ids]

    def check_reply(self, server_round: int, reply: Reply) -> None:
        if self.weighting == "num_examples" and reply.num_examples == 0:
            raise ReplyError(f"partition {reply.partition_id} reported num_examples = 0 (no weight in the average)")

    def counts(self, replies: list[Reply]) -> list[int]:
        """Integer weights of the average: ``n_i`` or all 1 (uniform)."""
        return [int(r.num_examples) for r in replies] if self.weighting == "num_examples" else [1] * len(replies)

    def average(self, replies: list[Reply]) -> list[np.ndarray]:
        """``sum_i p_i w_i`` with the arithmetic of Flower's ``aggregate_inplace`` (bit-identical to
        Flower's FedAvg for ``n_i`` weights)."""
        return fedavg_average([r.arrays for r in replies], self.counts(replies))

    def server_step(self, server_round: int, replies: list[Reply]) -> tuple[list[np.ndarray], dict[str, Any], Commit]:
        """``(w_{t+1}, metrics, commit)``: compute only; ``commit()`` stores the method's other state,
        which the step has checked finite (:func:`~flwr_strategies.core.validation.require_finite`).
        ``w_{t+1}`` is checked by the caller. FedAvg: the weighted average, nothing else to store."""
        return self.average(replies), {}, no_commit

    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        if not replies:
            return {}
        new, info, commit = self.server_step(server_round, replies)
        require_finite(f"{type(self).__name__}'s new global model", new)
        metrics = weighted_mean_metrics([(r.num_examples, r.metrics) for r in replies])
        metrics.update(info)
        commit()
        self.current = new
        return metrics

    def global_arrays(self) -> list[np.ndarray]:
        return self.current

    def adopt_global_arrays(self, arrays: list[np.ndarray]) -> None:
        """Continue from ``arrays`` (the global model a strategy wrapper changed)."""
        self.current = check_model_arrays(arrays, self.current, "the global model passed to the strategy")

    def extra_state(self) -> dict[str, Any]:
        return {"current": list(self.current)}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.current = [np.array(a) for a in state["current"]]


class FedProxServer(FedAvgServer):
    """FedProx (Li et al., MLSys 2020): FedAvg's server; the clients add ``mu/2 ||w - w_t||^2``.

    Sends ``proximal_mu`` in every client config (Flower's legacy key; the Message API's
    ``proximal-mu`` is sent too).
    """

    config_cls = FedProxConfig

    def client_config(self) -> dict[str, Any]:
        mu = float(self.config.proximal_mu)
        return {"proximal_mu": mu, "proximal-mu": mu}


class FedAdamServer(FedAvgServer):
    """FedAdam (Reddi et al., ICLR 2021): Adam on the server over ``Delta_t = avg - w_t``
    (Flower's legacy ``FedAdam`` arithmetic, bias-corrected step ``eta_norm``). The new model is
    cast back to the model's dtype (Flower's returns float64 for a float32 model under NumPy 2)."""

    config_cls = FedAdamConfig

    def __init__(self, initial_arrays, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        self.m_t: list[np.ndarray] | None = None
        self.v_t: list[np.ndarray] | None = None

    def server_step(self, server_round: int, replies: list[Reply]):
        c = self.config
        average = self.average(replies)
        delta = [x - y for x, y in zip(average, self.current)]
        m_prev = self.m_t if self.m_t is not None else [np.zeros_like(x) for x in delta]
        v_prev = self.v_t if self.v_t is not None else [np.zeros_like(x) for x in delta]
        m_t = [np.multiply(c.beta_1, x) + (1 - c.beta_1) * y for x, y in zip(m_prev, delta)]
        v_t = [c.beta_2 * x + (1 - c.beta_2) * np.multiply(y, y) for x, y in zip(v_prev, delta)]
        eta_norm = c.eta * np.sqrt(1 - np.power(c.beta_2, server_round + 1.0)) / (1 - np.power(c.beta_1, server_round + 1.0))
        # in the model's dtype: NumPy 2 promotes a float32 model to float64 here (``eta_norm`` is a
        # NumPy float64), which Flower's legacy FedAdam returns as the new model
        new = [(x + eta_norm * y / (np.sqrt(z) + c.tau)).astype(x.dtype, copy=False)
               for x, y, z in zip(self.current, m_t, v_t)]
        require_finite("FedAdam's moments", {"m_t": m_t, "v_t": v_t})

        def commit() -> None:
            self.m_t, self.v_t = m_t, v_t

        return new, {}, commit

    def extra_state(self) -> dict[str, Any]:
        out = super().extra_state()
        if self.m_t is not None:
            out["m_t"], out["v_t"] = list(self.m_t), list(self.v_t)
        return out

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        if "m_t" in state:
            self.m_t = [np.array(a) for a in state["m_t"]]
            self.v_t = [np.array(a) for a in state["v_t"]]
