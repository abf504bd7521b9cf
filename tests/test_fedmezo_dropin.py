"""The drop-in path on the Message API: a user's own ClientApp (own peft model, own DataLoader, own
loop + four FedMeZO lines) against ``serverapp.FedMeZO(...).start(...)`` with an ``evaluate_fn``
that loads the whole model by ``state_dict`` names. It gives exactly the ready-made client's result."""

import numpy as np
import torch
from flwr.app import ArrayRecord, MetricRecord
from flwr.clientapp import ClientApp

from flwr_strategies.clients.app import message_config, numpy_client_app, partition_query, train_reply
from flwr_strategies.clients.fedmezo import FedMeZOClient, MeZO, load_trainable_arrays, trainable_arrays
from flwr_strategies.fedmezo.serverapp import FedMeZO
from flwr_strategies.setup import ClientSetup, TrainConfig
from flwr_strategies.simulations.inprocess_grid import InProcessGrid
from flwr_strategies.simulations.lm.data import generate_instructions, tokenize_records
from flwr_strategies.simulations.lm.model import apply_lora, ensure_tiny_base, load_causal_lm

N = 2


def _user_side():
    base, tok = load_causal_lm(ensure_tiny_base())
    torch.manual_seed(0)
    model = apply_lora(base, r=4, alpha=8)
    data = tokenize_records(generate_instructions(24, seed=9), tok)
    loaders = [torch.utils.data.DataLoader(list(range(p, len(data), N)), batch_size=2, shuffle=False,
                                           collate_fn=data.batch) for p in range(N)]
    return model, data, loaders


def _run(client_app, model, data):
    evaluated = []

    def evaluate_fn(server_round, arrays):
        model.load_state_dict(arrays.to_torch_state_dict())  # the whole model, by state_dict names
        with torch.no_grad():
            model.eval()
            loss = float(model(**data.batch(range(8))).loss)
        evaluated.append(server_round)
        return MetricRecord({"loss": loss})

    strategy = FedMeZO(lr=2e-4, local_steps=3, batch_size=2, fraction_train=1.0, fraction_evaluate=0.0,
                       min_available_nodes=N, min_train_nodes=N, num_rounds=2)
    init = ArrayRecord({k: v.detach().clone() for k, v in model.state_dict().items()})
    result = strategy.start(grid=InProcessGrid(client_app, N), initial_arrays=init, num_rounds=2,
                            evaluate_fn=strategy.central_evaluation(evaluate_fn))
    assert evaluated == [0, 2]  # eval_every 10 (paper), the last round always
    return result.arrays.to_numpy_ndarrays(), strategy


def test_users_own_loop_equals_the_ready_made_client():
    model, data, loaders = _user_side()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}

    app = ClientApp()

    @app.train()
    def train(msg, context):
        pid = int(context.node_config["partition-id"])
        config = message_config(msg)
        load_trainable_arrays(model, msg.content["arrays"].to_numpy_ndarrays())  # + FedMeZO: adapters in
        opt = MeZO.from_config(model, config, pid)                                # + replaces the optimizer
        seen = 0
        for _, batch in zip(range(config["local_steps"]), loaders[pid]):
            opt.step(lambda: model(**batch).loss)                                 # + replaces backward(); step()
            seen += len(batch["input_ids"])
        return train_reply(msg, context, trainable_arrays(model), seen)           # + adapters out

    app.query("partition")(partition_query)
    mine, strategy = _run(app, model, data)
    assert strategy.history.rounds[-1]["bytes_up"] == N * sum(a.nbytes for a in trainable_arrays(model))

    model.load_state_dict(start)

    def client_fn(context):
        pid = int(context.node_config["partition-id"])
        setup = ClientSetup(partition_id=pid, num_partitions=N, model=model, train_data=loaders[pid], test_data=None,
                            train=TrainConfig(lr=2e-4, local_epochs=None, local_steps=3, batch_size=2), device="cpu",
                            seed=0)
        return FedMeZOClient(setup)

    ready, _ = _run(numpy_client_app(client_fn), model, data)
    assert len(mine) == len(start) and all(np.array_equal(a, b) for a, b in zip(mine, ready))
    changed = [k for (k, v), a in zip(start.items(), mine) if not np.array_equal(v.numpy(), a)]
    assert changed and all("lora_" in k for k in changed)
