"""``quickstart``: FedAvg, FedProx, DFedCata and FedLi-LS on ``digits`` (the README's first command).

Each method shows its own behaviour. FedLi-LS stands for FedLi: its clients find their own step
size by line search (``lr`` does not apply to it), so its curve differs from FedAvg's. FedLi-LU is
not in this comparison: its DFW step size is clipped at 1 in every round measured, which makes it
FedAvg plus a small server weight decay, and its curve lay on top of FedAvg's
(docs/results/fedli.md).
"""

from . import Preset, RunEntry, register_preset

register_preset(
    Preset(
        name="quickstart",
        summary="FedAvg, FedProx, DFedCata and FedLi-LS on digits, 10 clients, Dirichlet 0.5, 20 rounds (under 3 min on 2 CPUs)",
        base={
            "dataset": "digits",
            "num_clients": 10,
            "fraction_fit": 1.0,  # every method at full participation, so the curves compare
            "rounds": 20,
            "partition": "dirichlet",
            "alpha": 0.5,
            "lr": 0.05,
            "local_epochs": 1,
            "batch_size": 32,
            "seed": 0,
        },
        entries=[
            RunEntry("FedAvg", "fedavg"),
            RunEntry("FedProx", "fedprox", {"params": {"proximal_mu": 0.01}}),
            # decentralized: all 10 clients train and gossip over the random graph; beta 0.9 because
            # this preset has no weight decay / clipping (the paper's 0.99 needs them: docs/results/dfedcata.md)
            RunEntry("DFedCata", "dfedcata", {"params": {"beta": 0.9}}),
            # Armijo line-search clients: no learning rate (the preset's lr 0.05 does not apply)
            RunEntry("FedLi-LS", "fedli-ls"),
        ],
        target_accuracy=0.85,
    )
)
