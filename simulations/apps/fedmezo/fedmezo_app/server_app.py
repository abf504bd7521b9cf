"""fedmezo_app: the ServerApp. It runs flwr-strategies' FedMeZO (Ling et al., KDD 2024): every round
all clients tune the global LoRA adapters with H zeroth-order (MeZO) steps and the server averages
the adapters uniformly. It evaluates the global model on the held-out test split every
``eval-every`` rounds (and after the last), printing the test loss and the next-token accuracy."""

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr_strategies.serverapp import FedMeZO

from fedmezo_app.task import evaluate, load_model, load_test

app = ServerApp()


def print_round(record: dict) -> None:
    """The strategy's round record: bytes actually sent and received, the round's wall time."""
    print(f"ROUND round={record['round']} bytes_up={record['bytes_up']} bytes_down={record['bytes_down']} "
          f"wall_s={record.get('wall_s', 0.0):.3f}", flush=True)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Tune the LoRA adapters with FedMeZO for ``num-server-rounds`` rounds."""
    run = context.run_config
    num_rounds = int(run["num-server-rounds"])
    model, _ = load_model(run)
    test = load_test(run)
    strategy = FedMeZO(fraction_train=float(run["fraction-train"]), fraction_evaluate=0.0, seed=int(run["seed"]),
                       on_round_end=print_round, lr=float(run["lr"]), mu=float(run["mu"]),
                       local_steps=int(run["local-steps"]), batch_size=int(run["batch-size"]),
                       eval_every=int(run["eval-every"]), num_rounds=num_rounds)

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())  # the whole model, by state_dict names
        loss, accuracy = evaluate(model, test)
        print(f"CENTRAL round={server_round} accuracy={accuracy:.4f} loss={loss:.4f}", flush=True)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    initial = ArrayRecord({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=num_rounds,
                            evaluate_fn=strategy.central_evaluation(central_evaluate))
    adapters = {k: v for k, v in result.arrays.to_torch_state_dict().items() if "lora_" in k}
    torch.save(adapters, "final_model.pt")  # the tuned LoRA adapters
