"""The memory benchmark runs each mode on the same batch and reports the fields the docs quote."""

from flwr_strategies.simulations.bench.memory import _parser, measure


def test_memory_bench_modes_run():
    args = _parser().parse_args(["--batch-size", "2", "--repeat", "1", "--device", "cpu", "--max-len", "200"])
    rows = [measure(args, m) for m in ("forward", "mezo", "backprop")]
    for r in rows:
        assert r["peak_bytes"] > 0 and r["wall_s"] > 0 and r["lora_params"] == 2 * 2 * 128 * (64 + 64)
        assert r["figure"].startswith("process peak RSS")
    assert rows[0]["tokens"] == rows[1]["tokens"] == rows[2]["tokens"]
