"""Flower adapters: the only place where Flower types meet the framework-neutral cores.

- :class:`LegacyStrategy`: ``flwr.server.strategy.Strategy`` over a core (legacy API);
- :class:`MessageStrategy`: ``flwr.serverapp.strategy.Strategy`` over a core, with ``start()``;
- :class:`CentralizedLegacyStrategy` / :class:`CentralizedMessageStrategy`: the same with Flower's
  ``FedAvg`` constructor vocabulary, for server-model methods;
- :class:`RoundRecorder`: the per-round records both keep in ``strategy.history``.
"""

from .centralized import CentralizedLegacyStrategy, CentralizedMessageStrategy
from .legacy import LegacyStrategy
from .message import MessageStrategy
from .recorder import RoundRecorder

__all__ = ["CentralizedLegacyStrategy", "CentralizedMessageStrategy", "LegacyStrategy", "MessageStrategy", "RoundRecorder"]
