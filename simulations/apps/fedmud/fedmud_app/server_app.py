"""fedmud_app: the ServerApp. It runs flwr-strategies' FedMUD (Li et al., ICML 2025): each round a
fraction of the clients trains the decomposed model update, the server averages the factors
element-wise and, at every reset, merges the averaged update into the base model that all parties
keep (Sec. 3). It evaluates the merged global model on the dataset's test split."""

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr_strategies.serverapp import FedMUD

from fedmud_app.task import Net, evaluate, load_test

app = ServerApp()


def print_round(record: dict) -> None:
    """The strategy's round record: bytes actually sent and received, the round's wall time."""
    print(f"ROUND round={record['round']} bytes_up={record['bytes_up']} bytes_down={record['bytes_down']} "
          f"wall_s={record.get('wall_s', 0.0):.3f}", flush=True)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train FedMUD for ``num-server-rounds`` rounds on the connected SuperNodes."""
    run = context.run_config
    seed = int(run["seed"])
    torch.manual_seed(seed)
    model = Net()
    strategy = FedMUD(model=Net(), fraction_train=float(run["fraction-train"]), fraction_evaluate=0.0, seed=seed,
                      on_round_end=print_round, target_ratio=float(run["target-ratio"]), decomp=str(run["decomp"]),
                      pattern=str(run["pattern"]), reset_interval=int(run["reset-interval"]),
                      init_scale=float(run["init-scale"]))
    test_loader = load_test(run)

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        net.to("cuda:0" if torch.cuda.is_available() else "cpu")
        loss, accuracy = evaluate(net, test_loader)
        print(f"CENTRAL round={server_round} accuracy={accuracy:.4f} loss={loss:.4f}", flush=True)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                            num_rounds=int(run["num-server-rounds"]), evaluate_fn=central_evaluate)
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
