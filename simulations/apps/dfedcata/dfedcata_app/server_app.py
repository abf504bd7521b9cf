"""dfedcata_app: the ServerApp. It runs flwr-strategies' DFedCata (arXiv:2410.07272), which emulates
the peers' network: every node is a peer that trains every round, starts from its Nesterov (Catalyst)
extrapolated point ``x + beta (x - x_prev)`` and gossips with its neighbours in the peer graph. The
model it returns (and evaluates on the dataset's test split) is the average of the peers' models."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr_strategies.serverapp import DFedCata

from dfedcata_app.task import Net, evaluate, load_test

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train DFedCata for ``num-server-rounds`` rounds on every connected SuperNode."""
    run = context.run_config
    seed = int(run["seed"])
    torch.manual_seed(seed)
    model = Net()
    strategy = DFedCata(fraction_evaluate=0.0, seed=seed, beta=float(run["beta"]), lam=float(run["lam"]),
                        topology=str(run["topology"]), neighbours=int(run["neighbours"]))
    test_loader = load_test(run)

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        net.to("cuda:0" if torch.cuda.is_available() else "cpu")
        loss, accuracy = evaluate(net, test_loader)
        print(f"CENTRAL round={server_round} accuracy={accuracy:.4f} loss={loss:.4f}", flush=True)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                            train_config=ConfigRecord({"lr": float(run["lr"])}),
                            num_rounds=int(run["num-server-rounds"]), evaluate_fn=central_evaluate)
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
