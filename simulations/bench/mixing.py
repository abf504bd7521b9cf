"""Benchmark: the server-side gossip (mixing) step of the decentralized core.

``python -m simulations bench mixing [--clients 25 50 100] [--params 11000000]
[--topologies ring random] [--repeats 3] [--out FILE.json]``

For every (clients, topology) it times, on one ``(m, d)`` float32 table (d ~ ResNet-18 size):

- ``build_ms``: drawing the round's graph + building and validating W (Metropolis-Hastings);
- ``mix_ms``: ``X <- W @ X`` (sparse, in place, column blocks), cost ~ nnz(W) x d;
- ``avg_ms``: one plain average ``X.mean(axis=0)`` of the same models (cost m x d);
- ``ratio`` = mix_ms / avg_ms and ``nnz/m`` (= 1 + mean degree), which the ratio should track;
- ``ns per nnz x param`` = mix time / (nnz(W) * d): constant if the cost is edges x size.

Prints a markdown table; ``--out`` also writes the rows as JSON. Single thread
(``OMP_NUM_THREADS=1`` is set if unset).
"""

from __future__ import annotations

import argparse
import os
import timeit

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from flwr_strategies.decentralized import Topology, mix, mixing_matrix  # noqa: E402

from . import options, write_out  # noqa: E402


def _best(fn, repeats: int) -> float:
    """Best of ``repeats`` single calls, in milliseconds."""
    return min(timeit.repeat(fn, number=1, repeat=repeats)) * 1e3


def run(clients: list[int], params: int, topologies: list[str], repeats: int = 3, seed: int = 0) -> list[dict]:
    rows = []
    for m in clients:
        X = np.random.default_rng(seed).standard_normal((m, params), dtype=np.float32)
        avg_ms = _best(lambda: X.mean(axis=0), repeats)
        for name in topologies:
            top = Topology(name, m, seed=seed)
            state = {"t": 0}

            def build():
                state["W"] = mixing_matrix(top.graph(state["t"]), allow_disconnected=top.time_varying)
                state["t"] += 1

            build_ms = _best(build, repeats)
            W = state["W"]
            mix_ms = _best(lambda: mix(W, X, out=X), repeats)
            rows.append({"clients": m, "params": params, "topology": name, "nnz_per_row": W.nnz / m,
                         "build_ms": build_ms, "mix_ms": mix_ms, "avg_ms": avg_ms, "ratio": mix_ms / avg_ms,
                         "ns_per_nnz_elem": mix_ms * 1e6 / (W.nnz * params)})
        del X
    return rows


def table(rows: list[dict]) -> str:
    out = ["| clients | params | topology | nnz(W)/m | build W (ms) | mixing (ms/round) | plain average (ms) | "
           "mixing / average | ns per nnz x param |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {r['clients']} | {r['params'] / 1e6:.1f}M | {r['topology']} | {r['nnz_per_row']:.2f} | "
            f"{r['build_ms']:.1f} | {r['mix_ms']:.0f} | {r['avg_ms']:.0f} | {r['ratio']:.2f} | "
            f"{r['ns_per_nnz_elem']:.3f} |" for r in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m simulations bench mixing", description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, nargs="+", default=[25, 50, 100])
    p.add_argument("--params", type=int, default=11_000_000, help="model size d (ResNet-18 ~ 11.2M)")
    p.add_argument("--topologies", nargs="+", default=["ring", "random"])
    options(p, repeats=3, out=None)
    a = p.parse_args(argv)
    rows = run(a.clients, a.params, a.topologies, a.repeats)
    print(table(rows))
    write_out(a.out, rows)


if __name__ == "__main__":
    main()
