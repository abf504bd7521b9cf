"""What a newer Flower adds to ``Strategy.start()`` works for every Message-API strategy of this
library (flwr 1.43's ``should_stop``, for one): each takes every argument of the installed Flower's
``start()`` with Flower's default, and this library's FedAvg stops early when told to."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Strategy

import flwr_strategies.serverapp as serverapp
from flwr_strategies.clients.app import partition_query
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

FLOWER_START = inspect.signature(Strategy.start).parameters
STRATEGIES = [name for name in serverapp.__all__
              if isinstance(getattr(serverapp, name), type) and issubclass(getattr(serverapp, name), Strategy)]


@pytest.mark.parametrize("name", STRATEGIES)
def test_start_takes_every_argument_of_flowers_start(name):
    ours = inspect.signature(getattr(serverapp, name).start).parameters
    if any(p.kind is p.VAR_KEYWORD for p in ours.values()):  # passes them on (to MessageStrategy.start)
        return
    missing = [p for p in FLOWER_START if p not in ours]
    assert not missing, f"{name}.start() lacks Flower's {missing}"
    for p, flower in FLOWER_START.items():
        assert ours[p].default == flower.default, (p, ours[p].default, flower.default)


def _client_app() -> ClientApp:
    app = ClientApp()
    app.query("partition")(partition_query)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = [a + 1.0 for a in msg.content["arrays"].to_numpy_ndarrays()]
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10})}),
                       reply_to=msg)

    return app


def test_fedavg_stops_when_flowers_should_stop_says_so():
    """With flwr 1.43's ``should_stop``, the run ends after round 2 of 5; with an older Flower,
    ``start()`` refuses the argument as Flower's own does."""
    grid = InProcessGrid(_client_app(), 3)
    strategy = serverapp.FedAvg(fraction_evaluate=0.0, min_train_nodes=3, min_evaluate_nodes=0, min_available_nodes=3)
    kwargs = dict(grid=grid, initial_arrays=ArrayRecord([np.zeros(4)]), num_rounds=5,
                  should_stop=lambda rnd, result: rnd >= 2)
    if "should_stop" not in FLOWER_START:
        with pytest.raises(TypeError, match="should_stop"):
            strategy.start(**kwargs)
        return
    result = strategy.start(**kwargs)
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], np.full(4, 2.0))
