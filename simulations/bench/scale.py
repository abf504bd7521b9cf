"""``python -m simulations bench scale``: many clients, a stateful method, both backends.

Default: SCAFFOLD, 10,000 clients, 1% sampled per round, Synthetic(1,1) logistic regression with one
natural group per client at the 60-sample floor. Each backend runs in its own fresh process, so peaks
do not mix. Reported: seconds per round (median of the rounds after the first, and round 1 apart: it
includes the clients' first-use start-up), set-up time, final accuracy, and the peak resident memory
of the whole process tree (the driver, and for ``ray`` the SuperLink, the ``flwr-simulation`` process
and every Ray worker), sampled every 0.2 s. SCAFFOLD's client control variates live in each client's
``context.state`` (one Context per node in the simulation runtime,
:class:`~..driver.PartitionContexts` in process), not in a server-side dict; the in-process run also
reports how many contexts hold state and their bytes. (The mixing step at many peers: ``bench mixing``.)
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import numpy as np

from ..experiment import ExperimentConfig
from . import child_env, options, rss_kib, run_child, write_out

DEFAULTS = {"method": "scaffold", "dataset": "synthetic", "clients": 10_000, "fraction": 0.01, "rounds": 4}


class TreeMemory:
    """Peak resident memory of this process and all its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_total_mb = self.peak_single_mb = 0.0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        from ..deployment import descendants_of

        pids = descendants_of({os.getpid()})
        sizes = [rss_kib(p) / 1024.0 for p in pids]
        self.peak_total_mb = max(self.peak_total_mb, sum(sizes))
        self.peak_single_mb = max(self.peak_single_mb, max(sizes, default=0.0))
        self.peak_processes = max(self.peak_processes, len(pids))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "TreeMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def run_one(args: argparse.Namespace, backend: str) -> dict:
    """One backend's figures (run in this process)."""
    from ..backends import run_inprocess, run_ray
    from ..experiment import get_experiment

    cfg = ExperimentConfig(method=args.method, dataset=args.dataset, num_clients=args.clients, rounds=args.rounds,
                           fraction_fit=args.fraction, local_epochs=1, batch_size=32, lr=0.05, backend=backend,
                           client_cpus=args.client_cpus, synthetic_mean_samples=args.mean_samples, progress=False,
                           client_timeout=None if backend == "ray" else 3600.0)
    with TreeMemory() as mem:
        t0 = time.perf_counter()
        if backend == "inprocess":
            get_experiment(cfg)
            built = time.perf_counter() - t0
            outcome, _ = run_inprocess(cfg)
            states = [ctx.state for ctx in outcome.contexts if len(ctx.state)]  # the clients that keep state
            with_state = len(states)
            state_bytes = sum(rec.count_bytes() for st in states for rec in st.array_records.values()) / 2**20
        else:
            built = state_bytes = with_state = None
            outcome, timing = run_ray(cfg)
        total = time.perf_counter() - t0
    rounds = outcome.rounds
    walls = [r["wall_s"] for r in rounds if r["round"] > 0]
    return {"backend": backend, "method": cfg.method, "clients": cfg.num_clients,
            "sampled_per_round": rounds[1]["clients"], "rounds": cfg.rounds, "round1_s": walls[0],
            "median_round_s": float(np.median(walls[1:] if len(walls) > 1 else walls)), "total_s": total,
            "experiment_build_s": built, "startup_s": None if backend == "inprocess" else timing["startup_s"],
            "final_accuracy": rounds[-1].get("accuracy"), "failures": sum(r.get("failures", 0) for r in rounds),
            "peak_rss_tree_mb": mem.peak_total_mb, "peak_rss_largest_process_mb": mem.peak_single_mb,
            "processes": mem.peak_processes, "contexts_with_state": with_state, "client_state_mb": state_bytes,
            "path": outcome.path}


def federated(args: argparse.Namespace, backend: str) -> dict:
    """Run one backend in a fresh subprocess and return its figures."""
    return run_child(["scale", "--_one", backend, "--method", args.method, "--dataset", args.dataset, "--clients",
                      str(args.clients), "--fraction", str(args.fraction), "--rounds", str(args.rounds), "--client-cpus",
                      str(args.client_cpus), "--mean-samples", str(args.mean_samples)], f"bench scale ({backend})",
                     env=child_env(), timeout=args.timeout, marker="SCALE-RESULT ")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m simulations bench scale", description=__doc__.splitlines()[0])
    p.add_argument("--method", default=DEFAULTS["method"], help="a stateful method (default: scaffold)")
    p.add_argument("--dataset", default=DEFAULTS["dataset"], choices=("synthetic", "digits"))
    p.add_argument("--fraction", type=float, default=DEFAULTS["fraction"], help="fraction sampled per round")
    options(p, clients=DEFAULTS["clients"], rounds=DEFAULTS["rounds"], backends="inprocess,ray", out=None)
    p.add_argument("--client-cpus", type=float, default=1.0, help="Ray CPUs per client")
    p.add_argument("--mean-samples", type=float, default=0.0,
                   help="log-normal mean of Synthetic's client sizes (0: about 60 samples per client)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per backend run")
    p.add_argument("--_one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        import torch

        torch.set_num_threads(1)
        print("SCALE-RESULT " + json.dumps(run_one(args, args._one)), flush=True)
        return 0
    out = {"federated": [federated(args, backend) for backend in args.backends.split(",") if backend]}
    print(f"{args.method}, {args.dataset}, {args.clients} clients, {args.fraction:.0%} sampled per round, {args.rounds} rounds")
    print("| backend | sampled/round | round 1 s | median s/round (later rounds) | total s | final acc | failures "
          "| peak RSS, process tree MB | largest process MB | clients with state (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in out["federated"]:
        state = "-" if r["contexts_with_state"] is None else f"{r['contexts_with_state']} ({r['client_state_mb']:.1f})"
        acc = "-" if r["final_accuracy"] is None else f"{r['final_accuracy']:.3f}"
        print(f"| {r['backend']} | {r['sampled_per_round']} | {r['round1_s']:.2f} | {r['median_round_s']:.2f} | "
              f"{r['total_s']:.1f} | {acc} | {r['failures']} | {r['peak_rss_tree_mb']:.0f} | "
              f"{r['peak_rss_largest_process_mb']:.0f} | {state} |")
    write_out(args.out, out, indent=2)
    return 0
