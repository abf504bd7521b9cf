"""DO-ADP's server at scale: peak memory and seconds per round with 100 agents.

``python -m simulations bench doadp [--agents 100] [--dim 1000000] [--rounds 4] [--k-frac 0.4] [--p 0.8]
[--path core|message] [--out results.json]``

The server is what is measured; the agents are synthetic and cheap: an active agent (probability p,
from its own generator) returns a valid Top-k message (k distinct indices, k values) without training,
so a round costs what the server does: the consensus terms ``gamma (W XHAT - XHAT)``, one instruction
per agent, the checks of every reply and the update of the public copies.

- ``--path core``: the framework-neutral :class:`~flwr_strategies.doadp.server.DOADPServer` alone
  (``configure_train`` + ``train_round``), i.e. the state and the messages in flight;
- ``--path message``: the Message-API strategy (``DOADP(...).start``) on the in-process grid, so the
  ``ArrayRecord`` serialisation of every instruction and reply is included.

Each path runs in a fresh subprocess; the peak is its ``ru_maxrss``. Reported: one table's size
(n x d float64, the public copies), the resident set after setup, the peak, the peak above the
resident set before the rounds in tables' worth, and the median seconds per round.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

from . import ROOT, child_env, options, rss_kib, run_child, write_out


def _synthetic_reply(pid: int, t: int, d: int, k: int, p: float, seed: int):
    import numpy as np

    rng = np.random.default_rng([seed, pid, t])
    if rng.random() >= p:  # the reply's arrays, examples and metrics (doadp_active says whether it is empty)
        return [np.empty(0, np.int64), np.empty(0, np.float32)], 1, {"doadp_active": 0}
    start = int(rng.integers(d))
    idx = np.sort((start + np.arange(k)) % d).astype(np.uint32 if d <= 2**32 else np.uint64)
    return [idx, rng.normal(0.0, 1e-3, size=k).astype(np.float32)], 1, {"doadp_active": 1}


def _child(args) -> dict:
    import numpy as np

    from flwr_strategies.core.messages import Reply
    from flwr_strategies.doadp.config import DOADPConfig
    from flwr_strategies.doadp.server import DOADPServer

    import dp_accounting.pld  # noqa: F401  (imported before the baseline, as everything the run uses)
    import dp_accounting.rdp  # noqa: F401
    import torch  # noqa: F401  (the mixing step runs on torch kernels)
    from flwr.app import ArrayRecord  # noqa: F401

    import flwr_strategies.doadp.serverapp  # noqa: F401
    import flwr_strategies.simulations.inprocess_grid  # noqa: F401

    n, d = args.agents, args.dim
    init = [np.zeros(d, np.float32)]
    settings = dict(p=args.p, k_frac=args.k_frac, sigma=1.0, epsilon=1e6, public_copy="x0", eval_every=10**9)
    rss0 = rss_kib() / 1024.0  # after the imports: the tables' worth counts the run's own memory
    times = []
    if args.path == "core":
        core = DOADPServer(init, num_partitions=n, num_rounds=args.rounds, dataset_size=10**6, batch_size=1,
                           config=DOADPConfig(**settings))
        k = core.k
        rss_setup = rss_kib() / 1024.0
        for r in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            ins = core.configure_train(r, list(range(n)))
            t1 = time.perf_counter()
            replies = [Reply(i.partition_id, *_synthetic_reply(i.partition_id, r, d, k, args.p, args.seed)) for i in ins]
            del ins
            t2 = time.perf_counter()
            core.train_round(r, replies, sampled=range(n), on_bad_reply="raise")
            del replies
            times.append((t1 - t0) + (time.perf_counter() - t2))  # server work only, not the synthetic agents
    else:
        from flwr.app import ArrayRecord, Message

        from flwr_strategies.clients.app import message_config, partition_query, train_reply
        from flwr_strategies.doadp.serverapp import DOADP
        from flwr_strategies.simulations.inprocess_grid import InProcessGrid
        from flwr.clientapp import ClientApp

        app = ClientApp()
        k = max(1, int(round(args.k_frac * d)))

        @app.train()
        def train(msg: Message, context):
            cfg = message_config(msg)
            pid = int(context.node_config["partition-id"])
            return train_reply(msg, context, *_synthetic_reply(pid, int(cfg["server-round"]), d, k, args.p, args.seed))

        app.query("partition")(partition_query)
        grid = InProcessGrid(app, n)
        stamps = []
        strategy = DOADP(num_rounds=args.rounds, local_dataset_size=10**6, batch_size=1, min_available_nodes=n,
                         **settings, on_round_end=lambda rec: stamps.append(time.perf_counter()))
        rss_setup = rss_kib() / 1024.0
        t0 = time.perf_counter()
        strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=args.rounds)
        stamps = [t0] + stamps
        times = [b - a for a, b in zip(stamps, stamps[1:])][-args.rounds:]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    table = n * d * 8 / 2**20
    return {"path": args.path, "agents": n, "dim": d, "k": k, "p": args.p, "rounds": args.rounds,
            "table_mib": table, "rss_start_mib": rss0, "rss_setup_mib": rss_setup, "peak_rss_mib": peak,
            "peak_above_setup_tables": (peak - rss0) / table, "s_per_round_median": statistics.median(times),
            "s_per_round": times}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations bench doadp", description=__doc__.split("\n\n")[0])
    options(ap, agents=100, rounds=4, k_frac=0.4, p=0.8, seed=0, out=None)
    ap.add_argument("--dim", type=int, default=1_000_000, help="model parameters d")
    ap.add_argument("--path", choices=("core", "message", "both"), default="both")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    paths = ("core", "message") if args.path == "both" else (args.path,)
    results = []
    for path in paths:
        res = run_child(["doadp", "--child", "--path", path, "--agents", str(args.agents), "--dim", str(args.dim),
                         "--rounds", str(args.rounds), "--k-frac", str(args.k_frac), "--p", str(args.p),
                         "--seed", str(args.seed)], f"the {path} measurement",
                        env=child_env(OMP_NUM_THREADS="1", FLWR_TELEMETRY_ENABLED="0"), cwd=ROOT)
        results.append(res)
        print(f"{path:>8}: {res['agents']} agents x {res['dim']:,} params (k={res['k']:,}, p={res['p']}); "
              f"one table {res['table_mib']:.0f} MiB; RSS after imports {res['rss_start_mib']:.0f} MiB, after setup "
              f"{res['rss_setup_mib']:.0f} MiB, peak {res['peak_rss_mib']:.0f} MiB = "
              f"{res['peak_above_setup_tables']:.2f} tables above it; {res['s_per_round_median']:.2f} s/round")
    write_out(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
