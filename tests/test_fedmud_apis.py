"""FedMUD and its baselines through both Flower APIs: the same per-round numbers for every registered
method, checkpoint/resume equal to a straight run, and the client pieces in a user's own loop.

Settings are cheap (digits, 4 clients, half of them per round, a few local steps) but exercise the
whole protocol: partial participation makes clients miss merges, so catch-ups are sent, and the
per-client bookkeeping must survive a checkpoint.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apiharness import assert_same_records, legacy_run, message_run
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.app import partition_query
from flwr_strategies.clients.fedmud import STATE_BASE, STATE_META, FedMUDRound
from flwr_strategies.clients.training import local_sgd
from flwr_strategies.core.messages import Reply
from flwr_strategies.core.state import load_state, save_state
from flwr_strategies.fedmud import FedMUDConfig
from flwr_strategies.fedmud import serverapp as mud_message
from flwr_strategies.fedmud import strategy as mud_legacy
from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

METHODS = ["fedmud", "fedmud_mat", "fedmud_f", "fedmud_aad", "fedmud_bkd", "fedmud_bkd_f", "fedmud_bkd_aad",
           "fedlmt", "fedpara", "fedhm"]


def _cfg(method: str, rounds: int = 3) -> ExperimentConfig:
    return ExperimentConfig(method=method, dataset="digits", num_clients=4, fraction_fit=0.5, rounds=rounds,
                            local_epochs=None, local_steps=2, batch_size=16, lr=0.05, seed=1, partition="iid",
                            progress=False)


@pytest.mark.parametrize("method", METHODS)
def test_same_numbers_through_both_apis(method):
    a, legacy, _ = legacy_run(_cfg(method))
    b, message, _ = message_run(_cfg(method))
    assert_same_records(a, b)
    assert a[-1][1] < a[0][1]  # the loss went down: two equal no-ops would also be "equal"
    assert legacy.state_dict()["method"]["merges"] == message.state_dict()["method"]["merges"]


@pytest.mark.parametrize("api", ["legacy", "message"])
def test_checkpoint_resume_equals_straight_run(api, tmp_path):
    run = legacy_run if api == "legacy" else message_run
    cfg = _cfg("fedmud", rounds=5)
    straight, _, _ = run(cfg)
    first, strategy, clients = run(cfg, rounds=2)
    state = load_state(save_state(tmp_path / "fedmud.npz", strategy.state_dict()))
    assert state["server_round"] == 2
    assert state["method"]["merges"] == 1  # round 2 merged round 1's update
    resumed, strategy2, _ = run(cfg, state=state, clients=clients)
    assert resumed[-1] == straight[-1]
    assert [r for r in resumed if r[0] > 2] == [r for r in straight if r[0] > 2]
    # the server's per-client bookkeeping is one integer per client that replied
    ids, merges = strategy2.state_dict()["method"]["confirmed_ids"], strategy2.state_dict()["method"]["confirmed_merges"]
    assert ids.dtype == merges.dtype == np.int64 and len(ids) <= cfg.num_clients


# ---------------------------------------------------------------- the pieces in a user's own app
class Net(nn.Module):
    """The user's own model (quickstart style)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 32), nn.Linear(32, 256)
        self.fc3, self.fc4 = nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc4(torch.relu(self.fc3(torch.relu(self.fc2(x)))))


def _loaders(num: int):
    from flwr_strategies.simulations.datasets import load_digits_bundle

    bundle = load_digits_bundle(seed=0)
    x, y = bundle.train.x, bundle.train.y
    parts = np.array_split(np.arange(len(y)), num)
    train = [DataLoader(TensorDataset(x[p], y[p]), batch_size=32, shuffle=False) for p in parts]
    return train, bundle.test


def _user_train(model, loader, lr):  # the user's loop, untouched
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()


def _user_app(loaders) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model = Net()
        mud = FedMUDRound.from_message(model, msg, context)  # the FedMUD line
        loader = loaders[int(context.node_config["partition-id"])]
        _user_train(model, loader, float(msg.content["config"]["lr"]))
        return mud.reply(msg, context, len(loader.dataset))  # the FedMUD line

    app.query("partition")(partition_query)
    return app


def _accuracy(arrays: ArrayRecord, test) -> float:
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    model.eval()
    with torch.no_grad():
        return float((model(test.x).argmax(1) == test.y).float().mean())


def test_user_loop_with_dataloader_learns_and_keeps_base_in_context_state():
    loaders, test = _loaders(4)
    torch.manual_seed(0)
    initial = ArrayRecord(Net().state_dict())
    grid = InProcessGrid(_user_app(loaders), 4)
    strategy = mud_message.FedMUD(model=Net(), target_ratio=0.25, fraction_train=0.5, min_train_nodes=2,
                                  min_available_nodes=4, fraction_evaluate=0.0, seed=0)
    accs = {}

    def evaluate_fn(rnd, arrays):
        accs[rnd] = _accuracy(arrays, test)
        return MetricRecord({"accuracy": accs[rnd]})

    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=6, evaluate_fn=evaluate_fn,
                            train_config=ConfigRecord({"lr": 0.05}))
    assert accs[6] > accs[0] + 0.3, accs
    assert list(result.arrays.keys()) == list(initial.keys())  # plain model layout, named like the user's model
    core = strategy.core
    # every client that trained keeps its own W_base (equal to the server's after its last round)
    held = {p: grid.contexts[1000 + p].state for p in range(4)}
    trained = [p for p, st in held.items() if STATE_BASE in st]
    assert trained and set(core.confirmed) == set(trained)
    for p in trained:
        if held[p][STATE_META]["merges"] == core.merges:
            for a, b in zip(held[p][STATE_BASE].to_numpy_ndarrays(), core.dm.base_arrays()):
                np.testing.assert_array_equal(a, b)
    bytes_up = [r["bytes_up"] for r in strategy.history.rounds if r["round"] > 0]
    assert max(bytes_up) <= 2 * 4 * core.payload_scalars()  # only the payload goes up


def test_round_piece_wraps_in_place_and_unwraps():
    """Oracle for the piece itself: the wrapped model computes the global model, only the factors
    and uncompressed parameters train, finish() gives the payload and a plain model again."""
    torch.manual_seed(1)
    user = Net()
    keys = list(user.state_dict())
    init = [v.numpy().copy() for v in user.state_dict().values()]
    core = mud_legacy.FedMUD(model=Net(), target_ratio=0.25, seed=3).build_core(init, 1)
    ins = core.configure_train(1, [0])[0]
    state = RecordDict()
    mud = FedMUDRound(user, ins.arrays, ins.config, state)
    x = torch.randn(5, 64)
    ref = Net()
    ref.load_state_dict(dict(zip(keys, (torch.from_numpy(a) for a in core.global_arrays()))))
    assert torch.equal(user(x), ref(x))  # dW = 0 at reset: the wrapped model is the global model
    frozen = {n for n, p in user.named_parameters() if not p.requires_grad}
    assert frozen == {"fc2.parametrizations.weight.original", "fc3.parametrizations.weight.original"}
    assert STATE_BASE in state and state[STATE_META]["merges"] == 0
    local_sgd(user, [(x, torch.arange(5))], lr=0.1, epochs=1)
    out = mud.finish()
    assert [a.shape for a in out] == [s.shape for s in core.payload_spec]
    assert list(user.state_dict()) == keys and all(p.requires_grad for p in user.parameters())
    assert not torch.equal(user.fc3.weight, ref.fc3.weight)  # the trained effective weight
    # a second round reuses the same (now plain) model object
    core.train_round(1, [Reply(0, out, 5)], sampled=[0])
    ins2 = core.configure_train(2, [0])[0]
    mud2 = FedMUDRound(user, ins2.arrays, ins2.config, state)
    assert state[STATE_META]["merges"] == 1
    mud2.finish()


def test_round_piece_rejects_foreign_messages():
    with pytest.raises(ValueError, match="does not come from a FedMUD strategy"):
        FedMUDRound(Net(), [np.zeros(3)], {"lr": 0.1}, RecordDict())
    init = [v.numpy().copy() for v in Net().state_dict().values()]
    core = mud_legacy.FedMUD(model=Net(), target_ratio=0.25).build_core(init, 1)
    ins = core.configure_train(1, [0])[0]
    with pytest.raises(ValueError, match="keeps W_base between rounds"):
        FedMUDRound(Net(), ins.arrays, ins.config, None)
    other = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 256), nn.Linear(256, 200), nn.Linear(200, 10))
    with pytest.raises(ValueError, match="differs from the server's|has shape"):
        FedMUDRound(other, ins.arrays, ins.config, RecordDict())
    assert not any(hasattr(m, "parametrizations") for m in other.modules())  # left plain after the error


def test_constructors_take_flower_and_fedmud_arguments():
    init = [v.numpy().copy() for v in Net().state_dict().values()]
    s = mud_legacy.FedMUD(model=Net(), initial_parameters=init, fraction_fit=0.5, decomp="mat", pattern="ab",
                          target_ratio=0.3, reset_interval=2)
    assert (s.config.decomp, s.config.pattern, s.config.reset_interval, s.build_core(init, 4).fraction_train) == ("mat", "ab", 2, 0.5)
    m = mud_message.FedHM(model=Net(), fraction_train=0.2, target_ratio=0.3)
    assert m.config.fedhm and m.fraction_train == 0.2 and m.core is None  # the core is built in round 1
    cfg = FedMUDConfig(decomp="mat", pattern="aad", target_ratio=0.3)
    assert mud_legacy.FedLMT(model=Net(), initial_parameters=init, target_ratio=0.3).config.zero_base
    assert mud_legacy.FedMUD(model=Net(), initial_parameters=init, **vars(cfg)).config == cfg


def _client(train_data, **train):
    from flwr_strategies.clients.fedmud import FedMUDClient
    from flwr_strategies.setup import ClientSetup, TrainConfig

    setup = ClientSetup(partition_id=0, num_partitions=1, model=Net(), train_data=train_data, test_data=None,
                        train=TrainConfig(**train), device="cpu", seed=0, state=RecordDict())
    return FedMUDClient(setup, {})


def test_ready_made_client_takes_a_dataloader_and_honours_the_train_settings():
    from flwr_strategies.clients.training import TensorData

    torch.manual_seed(0)
    x, y = torch.randn(40, 64), torch.randint(0, 10, (40,))
    init = [v.numpy().copy() for v in Net().state_dict().values()]
    core = mud_legacy.FedMUD(model=Net(), target_ratio=0.25).build_core(init, 1)
    ins = core.configure_train(1, [0])[0]
    # a DataLoader: its own batches; num_examples = len(dataset); equal to the pieces in a hand-written loop
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False)
    cfg = {**ins.config, "lr": 0.1, "local_epochs": 2, "local_steps": 0}
    client = _client(loader, lr=0.1)
    arrays, n, metrics = client.fit(list(ins.arrays), cfg)
    assert n == 40 and metrics["steps"] == 10
    loss, n_eval, ev = client.evaluate(core.global_arrays(), {})  # federated evaluation on the loader
    assert n_eval == 40 and 0.0 <= ev["accuracy"] <= 1.0 and np.isfinite(loss)
    model = Net()
    mud = FedMUDRound(model, ins.arrays, cfg, RecordDict())
    for _ in range(2):
        _user_train(model, loader, 0.1)
    for a, b in zip(arrays, mud.finish()):
        np.testing.assert_array_equal(a, b)
    # gradient clipping: one step of lr 1 moves the trainable parameters by at most the clip bound
    data = TensorData(x, y)
    cfg1 = {**ins.config, "lr": 1.0, "local_steps": 1, "batch_size": 40}
    clipped, _, _ = _client(data, lr=1.0, grad_clip=1e-3).fit(list(ins.arrays), cfg1)
    moved = np.sqrt(sum(float(((a.astype(np.float64) - b) ** 2).sum()) for a, b, k in
                        zip(clipped, ins.arrays, core.payload_keys) if "running" not in k))
    assert 0 < moved <= 1e-3 * (1 + 1e-5)
    # momentum and weight decay reach the optimizer: two steps with them differ from plain SGD
    cfg2 = {**ins.config, "lr": 0.1, "local_steps": 2, "batch_size": 20}
    plain, _, _ = _client(data, lr=0.1).fit(list(ins.arrays), cfg2)
    heavy, _, _ = _client(data, lr=0.1, momentum=0.9).fit(list(ins.arrays), cfg2)
    decayed, _, _ = _client(data, lr=0.1, weight_decay=0.1).fit(list(ins.arrays), cfg2)
    assert not all(np.array_equal(a, b) for a, b in zip(plain, heavy))
    assert not all(np.array_equal(a, b) for a, b in zip(plain, decayed))
