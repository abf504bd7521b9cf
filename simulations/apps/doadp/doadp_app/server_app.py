"""doadp_app: the ServerApp. It runs flwr-strategies' DOADP (Huo et al., arXiv:2506.07102, Alg. 1),
which emulates the agents' network: every node is an agent on the paper's circulant graph, and each
round relays the agents' sparsified messages as the consensus terms of their neighbours. It
calibrates the noise for the agents' (epsilon, delta) and counts what every round spent
(``privacy_spent()``, printed at the end), and evaluates the agents' average model on the dataset's
test split."""

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr_strategies.serverapp import DOADP

from doadp_app.task import Net, evaluate, load_test

app = ServerApp()


def print_round(record: dict) -> None:
    """The strategy's round record: bytes actually sent and received, the round's wall time."""
    print(f"ROUND round={record['round']} bytes_up={record['bytes_up']} bytes_down={record['bytes_down']} "
          f"wall_s={record.get('wall_s', 0.0):.3f}", flush=True)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run DO-ADP for ``num-server-rounds`` iterations on every connected SuperNode."""
    run = context.run_config
    seed = int(run["seed"])
    num_rounds = int(run["num-server-rounds"])
    torch.manual_seed(seed)
    model = Net()
    strategy = DOADP(num_rounds=num_rounds, local_dataset_size=int(run["local-dataset-size"]), lr=float(run["lr"]),
                     batch_size=int(run["batch-size"]), seed=seed, on_round_end=print_round,
                     epsilon=float(run["epsilon"]), delta=float(run["delta"]), p=float(run["p"]),
                     k_frac=float(run["k-frac"]), gamma=float(run["gamma"]), beta=float(run["beta"]),
                     clip=float(run["clip"]), neighbours=int(run["neighbours"]))
    test_loader = load_test(run)

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = evaluate(net, test_loader)
        print(f"CENTRAL round={server_round} accuracy={accuracy:.4f} loss={loss:.4f}", flush=True)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=num_rounds,
                            evaluate_fn=central_evaluate)
    spent = strategy.privacy_spent()
    print(f"PRIVACY epsilon={spent.epsilon:.4f} delta={spent.delta:g} rounds={num_rounds}", flush=True)
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
