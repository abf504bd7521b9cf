"""DFedCata (arXiv:2410.07272) and its decentralized baselines, in the project's method shape.

- :mod:`.config`: ``DFedCataConfig`` (beta, lam, anchor, sequential mode), ``LocalRuleConfig``
  (the peers' local rule: lam, local_momentum, rho, steps_per_round, clip_scope), ``CODE_OPTIONS``.
- :mod:`.params`, :mod:`.extrapolation`: validation, the lr schedule, the Nesterov extrapolation.
- :mod:`.local`: torch pieces ``MoreauEnvelope``, ``LocalSGD``, ``SAM``; ``run_local``/``local_update``.
- :mod:`.reference`: NumPy reference simulator (synchronous / sequential in place), for tests.
- :mod:`.server`: cores ``DFedCataServer``, ``DFedAvgServer`` (DFedAvg/DFedAvgM/DFedSAM), ``DPSGDServer``.
- :mod:`.strategy` / :mod:`.serverapp`: ``DFedCata``, ``DFedAvg``, ``DPSGD``, ``FedSAM`` for the
  legacy and the Message API.
- :mod:`.registration`: ``dfedcata``, ``dfedavg``, ``dfedavgm``, ``dfedsam``, ``dpsgd``, ``fedsam``.
"""

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".config": ("CODE_OPTIONS", "DFedCataConfig", "LocalRuleConfig"),
    ".extrapolation": ("extrapolate",),
    ".params": ("ANCHORS", "lr_at_round", "validate_dfedcata"),
})
__all__ = sorted(_EXPORTS)
