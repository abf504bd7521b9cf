"""Flower adapters: the only place where Flower types meet the framework-neutral cores.

- :class:`LegacyStrategy`: ``flwr.server.strategy.Strategy`` over a method's core (legacy API);
- :class:`MessageStrategy`: ``flwr.serverapp.strategy.Strategy`` over a method's core, run by
  Flower's own ``Strategy.start()``;
- :class:`RoundRecorder`: the round record both keep in ``strategy.history`` (and the in-process
  driver too).

A method is a short declaration on each (see :mod:`flwr_strategies.adapters.method`).
"""

from .legacy import LegacyStrategy
from .message import MessageStrategy
from .method import REQUIRED
from .recorder import NoProgressError, RoundRecorder

__all__ = ["LegacyStrategy", "MessageStrategy", "NoProgressError", "REQUIRED", "RoundRecorder"]
