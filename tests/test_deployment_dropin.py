"""The drop-in recipe of docs/deployment.md (``simulations/dropin_example.py``) runs and learns."""

from __future__ import annotations

from flwr.common import Context, RecordDict
from flwr.server import Server

from flwr_strategies.simulations import dropin_example as ex
from flwr_strategies.simulations.backends import InProcessClientProxy


def test_dropin_example_learns():
    components = ex.server_fn(Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    manager = components.client_manager
    for pid in range(ex.NUM_CLIENTS):
        manager.register(InProcessClientProxy(pid, ex.NUM_CLIENTS, ex.client_fn))
    server = Server(client_manager=manager, strategy=components.strategy)
    history, _elapsed = server.fit(num_rounds=components.config.num_rounds, timeout=None)
    acc = [a for _, a in history.metrics_centralized["accuracy"]]
    assert len(acc) == ex.NUM_ROUNDS + 1
    # the label is a linear function of the inputs: a linear model must get well above chance
    assert acc[-1] >= 0.85 and acc[-1] > acc[0] + 0.1, acc
