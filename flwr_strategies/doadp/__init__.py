"""DO-ADP: decentralized momentum SGD with differential privacy, random activation and Top-k
sparsified messages (Huo, Liu, Ding, Johansson, Shi, "Decentralized Optimization with Amplified
Privacy via Efficient Communication", arXiv 2506.07102), its non-private reduction D-mSGD and the
paper's baselines DPDO, DP-DDA and CPGT.

Folder roles (the same in every method folder):

- :mod:`.config`: validated hyperparameter dataclasses (paper defaults);
- :mod:`.algorithm`, :mod:`.baselines`, :mod:`.clipping`, :mod:`.sparsify`, :mod:`.rng`,
  :mod:`.graphs`, :mod:`.theory`: the math, NumPy in / NumPy out, each tested alone;
- :mod:`.server`, :mod:`.baseline_server`: framework-neutral server cores on :mod:`.peer`'s
  :class:`~flwr_strategies.doadp.peer.PublicTableCore`, the decentralized core
  (:class:`~flwr_strategies.decentralized.server.DecentralizedCore`) of methods whose server holds
  only public tables;
- :mod:`.strategy` (legacy Flower API) and :mod:`.serverapp` (Message API): thin adapters;
- :mod:`.registration`: the registered methods ``doadp``, ``dmsgd``, ``dpdo``, ``dp-dda``, ``cpgt``;
- :mod:`.simulator`, :mod:`.problems`, :mod:`.torch_oracle`: reference engine for long runs.

Privacy accounting lives in :mod:`flwr_strategies.privacy`; the client side in
:mod:`flwr_strategies.clients.doadp` and :mod:`flwr_strategies.clients.doadp_baselines`.
"""

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".algorithm": ("AgentState", "DOADPParams", "StepResult", "agent_round", "consensus_terms", "reconcile"),
    ".clipping": ("clip_per_sample",),
    ".config": ("CPGTConfig", "DMSGDConfig", "DOADPConfig", "DPDDAConfig", "DPDOConfig"),
    ".rng": ("activation_coin", "agent_generator", "draw_batch"),
    ".simulator": ("DOADPNetwork", "check_mixing", "run_dmsgd", "run_doadp"),
    ".sparsify": ("rand_k", "top_k", "top_k_dense", "top_k_indices"),
})
__all__ = sorted(_EXPORTS)
