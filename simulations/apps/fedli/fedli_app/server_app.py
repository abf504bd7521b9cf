"""fedli_app: the ServerApp. It runs flwr-strategies' FedLiLS (Geetika, Uniyal, Chatterjee, "Towards
Hyper-parameter-free Federated Learning", Alg. 1): each round a fraction of the clients trains with
Armijo-SGD and the server moves the global model along the averaged update by eta_g (1 by default:
no server learning rate either). It evaluates the global model on the dataset's test split."""

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr_strategies.serverapp import FedLiLS

from fedli_app.task import evaluate, load_test, make_model

app = ServerApp()


def print_round(record: dict) -> None:
    """The strategy's round record: bytes actually sent and received, the round's wall time."""
    print(f"ROUND round={record['round']} bytes_up={record['bytes_up']} bytes_down={record['bytes_down']} "
          f"wall_s={record.get('wall_s', 0.0):.3f}", flush=True)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train FedLi-LS for ``num-server-rounds`` rounds on the connected SuperNodes."""
    run = context.run_config
    seed = int(run["seed"])
    torch.manual_seed(seed)
    model = make_model(str(run["model"]))
    strategy = FedLiLS(fraction_train=float(run["fraction-train"]), fraction_evaluate=0.0, seed=seed,
                       on_round_end=print_round, step_size_sync=str(run["step-size-sync"]),
                       armijo={"eta_max": float(run["eta-max"]), "armijo_c": float(run["armijo-c"]),
                               "backtrack_factor": float(run["backtrack-factor"])})
    test_loader = load_test(run)

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = make_model(str(run["model"]))
        net.load_state_dict(arrays.to_torch_state_dict())
        net.to("cuda:0" if torch.cuda.is_available() else "cpu")
        loss, accuracy = evaluate(net, test_loader)
        print(f"CENTRAL round={server_round} accuracy={accuracy:.4f} loss={loss:.4f}", flush=True)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                            num_rounds=int(run["num-server-rounds"]), evaluate_fn=central_evaluate)
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
