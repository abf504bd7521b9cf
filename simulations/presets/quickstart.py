"""``quickstart``: FedAvg, FedProx, DFedCata and FedLi-LU on ``digits`` (the README's first command)."""

from . import Preset, RunEntry, register_preset

register_preset(
    Preset(
        name="quickstart",
        summary="FedAvg, FedProx, DFedCata and FedLi-LU on digits, 10 clients, Dirichlet 0.5, 20 rounds (under 3 min on 2 CPUs)",
        base={
            "dataset": "digits",
            "num_clients": 10,
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
            # this preset has no weight decay / clipping (the paper's 0.99 needs them, spec section 10)
            RunEntry("DFedCata", "dfedcata", {"params": {"beta": 0.9}}),
            RunEntry("FedLi-LU", "fedli-lu"),
        ],
        target_accuracy=0.85,
    )
)
