"""DO-ADP's step size on a user-style CNN: which alpha keeps the agents' models stable, which learns.

``python -m simulations bench doadp_stepsize --data-dir DIR [--alphas 0.005,0.01,0.02,0.05,0.1,0.2,0.5]
[--rounds 200] [--agents 4] [--records 2000] [--batch-size 32] [--epsilon 1.0]
[--calibration theorem1|accountant] [--out results.json]``

The model is Flower's quickstart-pytorch CNN with one input channel (two 5x5 convolutions, three
linear layers; 44,426 parameters, no buffers), the data MNIST's idx files in ``--data-dir`` (the
first ``agents x records`` shuffled images are the agents' IID shards, the last 2,000 the test set).
Each alpha runs the DO-ADP core with the project's ready-made clients (client-side seeds) for
``--rounds`` rounds (one round = one private iteration of Huo et al.'s Algorithm 1) on the paper's
circulant graph (``neighbours=3`` on 4 agents), and prints the agents' mean training loss of the
first and last round, its maximum, the accuracy of the average of the agents' private models and of
the public model on the test set, sigma and ``step_noise_norm`` = ``alpha * sigma * sqrt(d)``, the
norm of the Gaussian noise one step adds to an agent's model.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from . import options, write_out


def _net():
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.pool, self.conv2 = nn.Conv2d(1, 6, 5), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(16 * 4 * 4, 120), nn.Linear(120, 84), nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x))).flatten(1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    return Net()


def run(args, alpha: float) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from flwr.app import RecordDict

    from flwr_strategies.clients.doadp import ClientBudget, DOADPClient, set_client_seed
    from flwr_strategies.clients.training import TensorData
    from flwr_strategies.core.messages import Reply
    from flwr_strategies.doadp.config import DOADPConfig
    from flwr_strategies.doadp.server import DOADPServer
    from flwr_strategies.setup import ClientSetup, TrainConfig
    from flwr_strategies.simulations.datasets import read_mnist_pair

    torch.set_num_threads(1)
    root = Path(args.data_dir)
    X, Y = read_mnist_pair(root / "t10k-images-idx3-ubyte.gz", root / "t10k-labels-idx1-ubyte.gz")
    X = ((torch.tensor(X, dtype=torch.float32) / 255.0 - 0.1307) / 0.3081).unsqueeze(1)
    Y = torch.tensor(Y).long()
    perm = torch.randperm(len(Y), generator=torch.Generator().manual_seed(0))
    X, Y = X[perm], Y[perm]
    n, q = args.agents, args.records
    if n * q + 2000 > len(Y):
        raise SystemExit(f"--agents x --records = {n * q} leaves fewer than 2,000 of {len(Y)} images for the test set")
    shards = [(X[i * q:(i + 1) * q], Y[i * q:(i + 1) * q]) for i in range(n)]
    Xt, Yt = X[-2000:], Y[-2000:]

    def evaluate(arrays):
        net = _net()
        with torch.no_grad():
            for p, a in zip(net.parameters(), arrays):
                p.copy_(torch.from_numpy(np.asarray(a, dtype=np.float32)))
            out = net(Xt)
            return float(F.cross_entropy(out, Yt)), float((out.argmax(1) == Yt).float().mean())

    torch.manual_seed(args.seed)
    init = [p.detach().numpy().copy() for p in _net().parameters()]
    core = DOADPServer(init, num_partitions=n, num_rounds=args.rounds, dataset_size=q, alpha=alpha,
                       batch_size=args.batch_size, graph=DOADPServer.default_graph(neighbours=min(7, n - 1 + n % 2)),
                       config=DOADPConfig(epsilon=args.epsilon, delta=1e-5, calibration=args.calibration,
                                          eval_every=args.rounds))
    states = [RecordDict() for _ in range(n)]
    for i, st in enumerate(states):
        set_client_seed(st, 1000 * args.seed + i)
    tc = TrainConfig(lr=alpha, local_epochs=None, local_steps=1, batch_size=args.batch_size)
    budget = ClientBudget(epsilon=args.epsilon, rounds=args.rounds)  # the experimenter runs every agent
    losses = []
    for r in range(1, args.rounds + 1):
        replies = []
        for ins in core.configure_train(r, list(range(n))):
            pid = ins.partition_id
            setup = ClientSetup(partition_id=pid, num_partitions=n, model=_net(), train_data=TensorData(*shards[pid]),
                                test_data=None, train=tc, device=torch.device("cpu"), seed=0, state=states[pid])
            arrays, num, metrics = DOADPClient(setup, {}, budget=budget).fit(ins.arrays, ins.config)
            replies.append(Reply(pid, arrays, num, metrics))
        losses.append(core.train_round(r, replies, sampled=range(n), on_bad_reply="raise").get("train_loss"))
    private = np.stack([st["doadp"].to_numpy_ndarrays()[0] for st in states]).mean(axis=0)
    _, acc_private = evaluate(core.unflatten(private))
    _, acc_public = evaluate(core.global_arrays())
    losses = [x for x in losses if x is not None]
    return {"alpha": alpha, "rounds": args.rounds, "d": core.d, "sigma": core.sigma,
            "step_noise_norm": core.step_noise_norm(1), "first_loss": losses[0], "last_loss": losses[-1],
            "max_loss": max(losses), "private_avg_accuracy": acc_private, "public_accuracy": acc_public,
            "dp_epsilon": core.guarantee(args.rounds)["dp_epsilon"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations bench doadp_stepsize", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True, help="folder with MNIST's t10k idx files")
    options(ap, alphas="0.005,0.01,0.02,0.05,0.1,0.2,0.5", rounds=200, agents=4, records=2000, batch_size=32,
            epsilon=1.0, seed=0, out=None)
    ap.add_argument("--calibration", choices=("theorem1", "accountant"), default="theorem1")
    args = ap.parse_args(argv)
    print(f"DO-ADP, quickstart CNN on MNIST: {args.agents} agents x {args.records} records, {args.rounds} rounds, "
          f"b={args.batch_size}, epsilon={args.epsilon}, calibration={args.calibration}\n")
    print("| alpha | sigma | step noise norm | train loss first -> last (max) | acc. private avg | acc. public | s |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    results = []
    for alpha in (float(a) for a in args.alphas.split(",")):
        t0 = time.time()
        res = run(args, alpha)
        res["seconds"] = time.time() - t0
        results.append(res)
        print(f"| {alpha:g} | {res['sigma']:.3f} | {res['step_noise_norm']:.2f} | {res['first_loss']:.2f} -> "
              f"{res['last_loss']:.4g} ({res['max_loss']:.4g}) | {res['private_avg_accuracy']:.3f} | "
              f"{res['public_accuracy']:.3f} | {res['seconds']:.0f} |", flush=True)
    write_out(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
