"""DFedCata (arXiv:2410.07272) and decentralized baselines.

- :mod:`.params`: hyperparameter validation (``0 <= beta < 1``, ``lam >= 0``, ``lr*lam < 1``).
- :mod:`.extrapolation`: Nesterov extrapolation between rounds.
- :mod:`.local`: torch local solvers (prox-SGD, SGD, heavy-ball, SAM).
- :mod:`.reference`: NumPy reference simulator (synchronous / sequential in-place).
- :mod:`.strategy`: Flower strategies ``DFedCata``, ``DFedAvg`` (also DFedAvgM/DFedSAM server
  side), ``DPSGD``.
"""

from .extrapolation import extrapolate
from .params import ANCHORS, lr_at_round, validate_dfedcata

__all__ = ["extrapolate", "validate_dfedcata", "lr_at_round", "ANCHORS"]
