"""``bench aggregate`` at toy sizes, so the benchmark cannot rot: both strategies of each API
aggregate the same replies (this library's legacy FedAvg bit-identically to Flower's, the
Message-API one within float32 rounding), and DFedCata runs a round through both adapters with
its messages in flight (at least its 3 tables plus the round's 2 message lists)."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("api", ["legacy", "message"])
def test_dfedcata_benchmark_runs_a_round_through_each_adapter(api):
    res = measure_dfedcata(api, peers=4, params=20_000, rounds=1)
    assert res["api"] == api and res["table_bytes"] == 4 * 20_000 * 4
    assert res["traced_tables"] >= 5


def test_cli_prints_the_tables(capsys):
    assert main(["--replies", "3", "--params", "300", "--arrays", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| legacy | flwr_strategies.FedAvg |" in out and "| message | flwr.serverapp.strategy.FedAvg |" in out
