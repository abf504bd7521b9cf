"""``bench aggregate`` at toy sizes, so the benchmark cannot rot: both strategies of each API
aggregate the same replies (this library's legacy FedAvg bit-identically to Flower's, the
Message-API one within float32 rounding), and DFedCata runs a round through both adapters with
its messages in flight: its 2 state tables plus the round's 2 message lists, and not a third
state table (the spare is released once the instructions are serialized, the replies are views of
the messages' bytes)."""

from __future__ import annotations

import functools

import pytest

from flwr_strategies.decentralized import mixing as mixing_module
from flwr_strategies.decentralized import server as server_module
from flwr_strategies.decentralized.consensus import consensus_distance
from flwr_strategies.simulations.bench.aggregate import main, measure_dfedcata, measure_fedavg


def test_fedavg_benchmark_compares_the_same_aggregation():
    res = measure_fedavg(replies=5, params=3000, arrays=3, repeats=2)
    assert res["legacy"]["max_abs_diff"] == 0.0  # Flower's aggregate_inplace arithmetic
    assert res["message"]["max_abs_diff"] < 1e-6  # Flower's Message FedAvg multiplies in float32
    for api in ("legacy", "message"):
        for who in ("ours", "flower"):
            r = res[api][who]
            assert len(r["wall_s_runs"]) == 2 and r["cpu_s"] >= 0
            assert r["peak_bytes"] >= res["model_bytes"]  # the new model at least


def test_fedavg_holds_the_new_model_and_its_message_not_the_replies():
    """20 replies of a 0.8 MB model through each adapter: the call's peak allocation is the new
    model and its serialized copy (2 models and a few small objects per reply), at most Flower's
    own; decoding every reply first held 22 models."""
    res = measure_fedavg(replies=20, params=200_000, arrays=4, repeats=1)
    for api in ("legacy", "message"):
        ours, flower = res[api]["ours"]["peak_bytes"], res[api]["flower"]["peak_bytes"]
        assert ours < 2.2 * res["model_bytes"], (api, ours / res["model_bytes"])
        assert ours <= flower, (api, ours / flower)


@pytest.mark.parametrize("api", ["legacy", "message"])
def test_dfedcata_benchmark_runs_a_round_through_each_adapter(api, monkeypatch):
    # the in-place mix's column-block buffer (64 MiB) and the consensus distance's float64 column
    # chunks (65,536 columns) scaled down with the table, as they are at 50 x 2M
    monkeypatch.setattr(mixing_module, "INPLACE_BLOCK_BYTES", 1 << 20)
    monkeypatch.setattr(server_module, "consensus_distance", functools.partial(consensus_distance, chunk=2048))
    res = measure_dfedcata(api, peers=32, params=50_000, rounds=2)
    assert res["api"] == api and res["table_bytes"] == 32 * 50_000 * 4
    # mixed models + anchors + the round's instructions + its replies, held at once ...
    assert res["traced_tables"] >= 4
    # ... plus the block buffer (1/6 table) and a few rows, but no spare table and no decoded copies
    assert res["traced_tables"] < 4.6, res["traced_tables"]


def test_dfedcata_through_flower_start_holds_no_earlier_replies(monkeypatch):
    """Through Flower's own ``Strategy.start()``, which keeps a round's replies bound until the next
    round's replies arrive: the strategy drops the arrays of replies its tables have taken, so the
    peak is the same 4 tables and the buffer as above (5.25 tables when the old replies stayed)."""
    monkeypatch.setattr(mixing_module, "INPLACE_BLOCK_BYTES", 1 << 20)
    monkeypatch.setattr(server_module, "consensus_distance", functools.partial(consensus_distance, chunk=2048))
    res = measure_dfedcata("start", peers=32, params=50_000, rounds=3)
    assert 4 <= res["traced_tables"] < 4.6, res["traced_tables"]


def test_cli_prints_the_tables(capsys):
    assert main(["--replies", "3", "--params", "300", "--arrays", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| legacy | flwr_strategies.FedAvg |" in out and "| message | flwr.serverapp.strategy.FedAvg |" in out


def test_scaffold_server_step_streams():
    """SCAFFOLD's server step holds about what a streaming NumPy step holds (stacking a float64 copy of
    every control update held 42 models at 100 x 1M), and computes the same step."""
    from flwr_strategies.simulations.bench.aggregate import measure_scaffold

    res = measure_scaffold(replies=20, params=200_000, arrays=4, repeats=1)
    assert res["peak_ratio"] <= 1.5, res["peak_ratio"]
    assert res["ours"]["peak_bytes"] < 4 * res["model_bytes"], res["ours"]["peak_bytes"] / res["model_bytes"]
    assert res["max_abs_diff"] < 1e-6  # our model average scales in float32 as Flower's aggregate_inplace
