"""DO-ADP, D-mSGD, DPDO, DP-DDA and CPGT as legacy Flower strategies (``flwr.server.strategy``).

Each class takes the peer network (``num_clients``, the graph), the run length ``num_rounds`` (the
privacy calibration covers it), the agents' local dataset size ``local_dataset_size`` (q, for the
sampling rate b/q), the step size and batch size, and the method's hyperparameters (the fields of
its config dataclass in :mod:`.config`, with the paper's defaults). Every client takes part in every
round; the matching client is :mod:`flwr_strategies.clients.doadp` (DO-ADP, D-mSGD) or
:mod:`flwr_strategies.clients.doadp_baselines`.

Example::

    strategy = DOADP(initial_parameters=ndarrays, num_clients=20, num_rounds=2000,
                     local_dataset_size=3000, alpha=0.01, batch_size=32, epsilon=1.0, delta=1e-5,
                     evaluate_fn=evaluate)
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..adapters.centralized import initial_ndarrays
from ..adapters.legacy import LegacyStrategy
from .baseline_server import CPGTServer, DPDDAServer, DPDOServer
from .config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from .server import DMSGDServer, DOADPServer

__all__ = ["DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT", "split_config"]

_CORE_KEYS = ("seed", "lr_decay")


def split_config(config_cls, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(config_cls(**its fields in kwargs), the other kwargs)``."""
    names = {f.name for f in fields(config_cls)}
    cfg = config_cls(**{k: v for k, v in kwargs.items() if k in names})
    return cfg, {k: v for k, v in kwargs.items() if k not in names}


class _PeerLegacy(LegacyStrategy):
    server_cls: type = DOADPServer
    config_cls: type = DOADPConfig

    def __init__(self, *, initial_parameters, num_clients: int, num_rounds: int, local_dataset_size: int,
                 alpha: float = 0.01, batch_size: int = 32, evaluate_fn=None, on_fit_config_fn=None,
                 on_bad_reply: str = "drop", min_available_clients: int | None = None, **kwargs: Any) -> None:
        config, rest = split_config(self.config_cls, kwargs)
        core_kwargs = {k: rest.pop(k) for k in _CORE_KEYS if k in rest}
        core_kwargs.update(self.server_cls.graph_arguments(rest))
        core = self.server_cls(initial_ndarrays(initial_parameters), num_partitions=num_clients,
                               num_rounds=num_rounds, dataset_size=local_dataset_size, alpha=alpha,
                               batch_size=batch_size, config=config, on_train_config=on_fit_config_fn, **core_kwargs)
        super().__init__(core, evaluate_fn=evaluate_fn, on_bad_reply=on_bad_reply,
                         min_available_clients=num_clients if min_available_clients is None else min_available_clients,
                         **rest)


_COMMON = """
    Parameters
    ----------
    initial_parameters : Parameters | list[np.ndarray]
        Initial model x0, shared by every agent (floating-point arrays, no integer buffers).
    num_clients : int
        Number of agents n (the paper: 20).
    num_rounds : int
        Planned rounds T (one round = one iteration); privacy is calibrated for T rounds.
    local_dataset_size : int
        q, the smallest local dataset of an agent (records), >= batch_size.
    alpha : float (default: 0.01, the paper's CNN step size)
        Step size, > 0.
    batch_size : int (default: 32, [spec]; the paper uses 1)
        Records per private step, in [1, q].
    lr_decay : float (default: 1.0)
        Per-round step-size decay, in (0, 1].
    topology : str | Topology (default: "circulant", paper)
        Fixed undirected peer graph (see :class:`~flwr_strategies.decentralized.config.GraphConfig`),
        or ``Topology.from_adjacency(A)``.
    neighbours : int (default: 7, paper: ``i +- 1, 2, 3``)
        Neighbourhood size, the agent itself included; at most the number of agents.
    weights : str (default: "auto")
        Mixing weights: ``"auto"`` (paper's ``I - L/(d_max+1)`` on regular graphs), ``"uniform"``,
        ``"metropolis_hastings"``.
    failure_policy : str (default: "renormalize")
        An agent whose node is gone is left out of the mixing (``"renormalize"``, ``"self"``) or
        stops the run (``"stop"``).
    evaluate_fn : callable | None
        Flower's ``evaluate_fn(server_round, ndarrays, config)`` on the public average model (and,
        with ``evaluate_private``, on the private average too; simulation only).
    on_fit_config_fn : callable | None
        Extra per-round client config (its ``seed`` entry is never forwarded).
    on_bad_reply : str (default: "drop")
        ``"drop"`` (a bad reply is a failed agent, which skips the round) or ``"raise"``.
    **kwargs
        The method's hyperparameters (fields of {cfg}) and further
        :class:`~flwr_strategies.adapters.legacy.LegacyStrategy` arguments.
"""


class DOADP(_PeerLegacy):
    __doc__ = (
        """DO-ADP (Huo, Liu, Ding, Johansson, Shi, "Decentralized Optimization with Amplified Privacy via
    Efficient Communication", arXiv 2506.07102): decentralized momentum SGD with Gaussian DP noise,
    random activation (p) and Top-k messages with error feedback (k/d). The reported epsilon is the
    one a standard accountant certifies (``dp_epsilon`` at ``dp_delta``); the paper's Theorem 1
    bound is reported beside it (``theorem1_epsilon``/``theorem1_delta``).
"""
        + _COMMON.format(cfg=":class:`~flwr_strategies.doadp.config.DOADPConfig`: epsilon, delta, p, k_frac, "
                         "gamma, beta, clip, clip_mode, sampling, calibration, delta0, sigma, public_copy, "
                         "eval_every, evaluate_private, msg_dtype, allow_low_p")
    )
    server_cls = DOADPServer
    config_cls = DOADPConfig


class DMSGD(_PeerLegacy):
    __doc__ = (
        """Decentralized momentum SGD (eq. (2) of Huo et al.), NOT private: DO-ADP's network with p = 1,
    k = d, no clipping and no noise.
"""
        + _COMMON.format(cfg=":class:`~flwr_strategies.doadp.config.DMSGDConfig`: gamma, beta, eval_every, msg_dtype")
    )
    server_cls = DMSGDServer
    config_cls = DMSGDConfig


class DPDO(_PeerLegacy):
    __doc__ = (
        """DPDO (Huang, Mitra, Vaidya, ICDCN 2015), baseline of DO-ADP: Laplace-perturbed broadcasts
    with geometrically decaying noise and step size; pure epsilon-DP (certified by basic composition
    with amplification by subsampling).
"""
        + _COMMON.format(cfg=":class:`~flwr_strategies.doadp.config.DPDOConfig`: epsilon, clip, rs, rn, "
                         "eval_every, evaluate_private")
    )
    server_cls = DPDOServer
    config_cls = DPDOConfig


class DPDDA(_PeerLegacy):
    __doc__ = (
        """DP-DDA (Liu, Johansson, Shi, Automatica 2024), baseline of DO-ADP: differentially private
    distributed dual averaging with node sampling; every node transmits every round.
"""
        + _COMMON.format(cfg=":class:`~flwr_strategies.doadp.config.DPDDAConfig`: epsilon, delta, p_s, beta0, "
                         "reg, sampling, sigma, clip, eval_every, evaluate_private")
    )
    server_cls = DPDDAServer
    config_cls = DPDDAConfig


class CPGT(_PeerLegacy):
    __doc__ = (
        """CPGT (Xie, Yi, Wang, Cao, Ren, IFAC 2023), baseline of DO-ADP: compressed gradient tracking
    with Laplace noise on both transmitted variables before Top-k. Its epsilon is the spec's heuristic
    calibration, not certified (see :func:`flwr_strategies.privacy.laplace.cpgt_laplace_scale`).
"""
        + _COMMON.format(cfg=":class:`~flwr_strategies.doadp.config.CPGTConfig`: epsilon, k_frac, a, g_cons, "
                         "rs, rn, clip, eval_every, evaluate_private")
    )
    server_cls = CPGTServer
    config_cls = CPGTConfig


#: Former name of :class:`DOADP` (kept so existing imports keep working).
DOADPStrategy = DOADP
