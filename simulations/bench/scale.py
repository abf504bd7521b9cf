"""``python -m simulations bench scale``: 1,000 clients on a 2-core machine.

- FedAvg with 1,000 clients (10% sampled per round) on ``synthetic`` (logistic regression, one
  natural group per client) or ``digits``, on the ``inprocess`` and ``ray`` backends: wall time
  per round (median), and the peak resident memory of this process and of its children (Ray
  workers), from ``getrusage``.
- The decentralized core at 1,000 clients: memory of the server's per-client model table and the
  mixing time per round on the ring and the paper's random-10 graph, for a given model size.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from ..experiment import ExperimentConfig
from ..runner import run_experiment


def _rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def federated(dataset: str, backend: str, clients: int, rounds: int, client_cpus: float) -> dict:
    cfg = ExperimentConfig(
        method="fedavg", dataset=dataset, num_clients=clients, rounds=rounds, fraction_fit=0.1,
        local_epochs=1, batch_size=32, lr=0.1, backend=backend, client_cpus=client_cpus, progress=False,
    )
    t0 = time.perf_counter()
    res = run_experiment(cfg)
    walls = [r["wall_s"] for r in res["rounds"] if r["round"] > 0]
    return {
        "backend": backend, "dataset": dataset, "clients": clients, "sampled_per_round": res["rounds"][1]["clients"],
        "rounds": rounds, "median_round_s": float(np.median(walls)), "total_s": time.perf_counter() - t0,
        "final_accuracy": res["summary"]["final_accuracy"],
        "peak_rss_self_mb": _rss_mb(resource.RUSAGE_SELF), "peak_rss_children_mb": _rss_mb(resource.RUSAGE_CHILDREN),
    }


def decentralized(clients: int, params: int, topologies: list[str]) -> list[dict]:
    from flwr_strategies.decentralized import Topology, mix, mixing_matrix

    rows = []
    before = _rss_mb(resource.RUSAGE_SELF)
    X = np.random.default_rng(0).standard_normal((clients, params), dtype=np.float32)
    table_mb = X.nbytes / 2**20
    for name in topologies:
        top = Topology(name, clients, seed=0)
        W = mixing_matrix(top.graph(0), allow_disconnected=top.time_varying)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            mix(W, X, out=X)
            times.append(time.perf_counter() - t0)
        rows.append({"clients": clients, "params": params, "topology": name, "nnz_W": int(W.nnz),
                     "table_mb": table_mb, "mix_ms": 1e3 * min(times)})
    for r in rows:
        r["peak_rss_growth_mb"] = _rss_mb(resource.RUSAGE_SELF) - before
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m simulations bench scale", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic", choices=("synthetic", "digits"))
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="inprocess,ray")
    p.add_argument("--client-cpus", type=float, default=2.0, help="Ray CPUs per client")
    p.add_argument("--params", type=int, default=101_770, help="model size for the decentralized check (default: MLP 784-128-10)")
    p.add_argument("--topologies", default="ring,random")
    p.add_argument("--out")
    args = p.parse_args(argv)
    out = {"federated": [], "decentralized": []}
    for backend in [b for b in args.backends.split(",") if b]:
        row = federated(args.dataset, backend, args.clients, args.rounds, args.client_cpus)
        out["federated"].append(row)
    print("| backend | dataset | clients (sampled/round) | median s/round | total s | final acc | peak RSS self MB | peak RSS children MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out["federated"]:
        print(f"| {r['backend']} | {r['dataset']} | {r['clients']} ({r['sampled_per_round']}) | {r['median_round_s']:.2f} | {r['total_s']:.1f} | {r['final_accuracy']:.3f} | {r['peak_rss_self_mb']:.0f} | {r['peak_rss_children_mb']:.0f} |")
    out["decentralized"] = decentralized(args.clients, args.params, args.topologies.split(","))
    print()
    print("| clients | params | topology | nnz(W) | model table MB | mixing ms/round |")
    print("|---|---|---|---|---|---|")
    for r in out["decentralized"]:
        print(f"| {r['clients']} | {r['params']} | {r['topology']} | {r['nnz_W']} | {r['table_mb']:.0f} | {r['mix_ms']:.1f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0
