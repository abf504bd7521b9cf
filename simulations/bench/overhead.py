"""``python -m simulations bench overhead``: what Flower costs over a plain PyTorch loop.

One fixed workload (FedAvg, 20 clients, all sampled, 1 local epoch, 5 rounds; the MNIST CNN on
MNIST from ``--data-dir``, or the MLP on digits) is run three ways in one invocation:

(a) the floor: a plain loop with no Flower doing exactly the same local training (same model,
    data order, steps and weighted averaging in partition order) and the same evaluation;
(b) the ``inprocess`` backend (the core and clients called directly); (c) the ``ray`` backend,
start-up reported apart from the rounds.

(b2) is the project's Flower app (the Message-API strategy and ClientApp of ``flwr run``) on an
in-process Grid: Flower's message objects and array serialisation without Flower's runtime. (c) is
that app under ``flwr run`` in Flower's simulation runtime. So (b) - (a) is ours, (b2) - (b) is
Flower's message layer, and (c) - (b2) is Flower's runtime (SuperLink polling, Ray actors).

Wall times are the fastest of ``--repeat`` interleaved runs (the machine may be shared); CPU times
of this process are given beside them. It checks that every path ends with the same model.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

from flwr_strategies.clients.base import train_settings
from flwr_strategies.clients.training import client_generator, get_weights, local_sgd, set_weights
from flwr_strategies.core.aggregation import fedavg_average

from ..experiment import ExperimentConfig, get_experiment
from . import max_diff, options, timed, write_out


def plain_loop(cfg: ExperimentConfig) -> tuple[list[np.ndarray], list[float]]:
    """FedAvg as a plain PyTorch loop (no Flower): returns final weights and accuracies.
    The average is the library's NumPy one (:func:`~flwr_strategies.core.aggregation.fedavg_average`,
    each client's model added in partition order as soon as it is trained)."""
    exp = get_experiment(cfg)
    torch.set_num_threads(max(1, cfg.client_threads))
    global_w = [a.copy() for a in exp.initial_parameters]
    accs = [exp.evaluate_fn(0, global_w, {})[1]["accuracy"]]
    data = {pid: exp.task.client_data(pid)[0] for pid in range(cfg.num_clients)}
    with exp.borrowed_model() as model:
        for rnd in range(1, cfg.rounds + 1):
            settings = train_settings(exp.fit_config(rnd), exp.train)

            def local_models():
                for pid in range(cfg.num_clients):
                    set_weights(model, global_w)
                    local_sgd(model, data[pid], generator=client_generator(cfg.seed, rnd, pid), **settings)
                    yield get_weights(model)

            global_w = fedavg_average(local_models(), [len(data[pid]) for pid in range(cfg.num_clients)])
            accs.append(exp.evaluate_fn(rnd, global_w, {})[1]["accuracy"])
    return global_w, accs


def message_api_inprocess(cfg: ExperimentConfig) -> tuple[list[np.ndarray], list[float]]:
    """The project's Flower app (Message-API strategy + ClientApp) on an in-process Grid: Flower's
    message objects and array serialisation, without Flower's runtime (no SuperLink, no Ray)."""
    from flwr.app import Context, RecordDict

    from ..app import client_app, serve
    from ..inprocess_grid import InProcessGrid

    rc = {"experiment": json.dumps(cfg.to_dict(), default=str)}
    grid = InProcessGrid(client_app, cfg.num_clients, run_config=rc)
    report = serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    return report.final, [r["accuracy"] for r in report.records()]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m simulations bench overhead", description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", help="MNIST idx folder; without it: digits + MLP")
    options(p, num_clients=20, rounds=5, device="cpu", client_gpus=0.0)
    p.add_argument("--model", help="override the model (e.g. cnn_cifar, resnet18_gn with --dataset cifar10)")
    p.add_argument("--dataset", help="override the dataset")
    p.add_argument("--repeat", type=int, default=3, help="runs of (a), (b) and (b2), interleaved; the fastest counts")
    p.add_argument("--client-cpus", type=float, default=None, help="Ray CPUs per client (default: all CPUs, one actor)")
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args(argv)

    dataset = args.dataset or ("mnist" if args.data_dir else "digits")
    cfg = ExperimentConfig(method="fedavg", dataset=dataset, data_dir=args.data_dir, num_clients=args.num_clients,
                           rounds=args.rounds, seed=0, fraction_fit=1.0, local_epochs=1, batch_size=32, lr=0.05,
                           model=args.model, device=args.device, progress=False,
                           client_cpus=args.client_cpus or float(os.cpu_count() or 1), client_gpus=args.client_gpus)
    exp = get_experiment(cfg)
    torch.set_num_threads(max(1, cfg.client_threads))
    print(f"workload: FedAvg, {dataset}, {exp.task.model_name}, {cfg.num_clients} clients, 1 local epoch, "
          f"{cfg.rounds} rounds, device {cfg.device}; fastest of {args.repeat} runs for (a), (b), (b2)")
    from ..backends import run_inprocess

    for warm_up in (plain_loop, run_inprocess, message_api_inprocess):  # torch kernels, allocator
        warm_up(ExperimentConfig(**{**cfg.to_dict(), "rounds": 1}))
    runs: dict[str, list[tuple]] = {"a": [], "b": [], "b2": []}
    for _ in range(max(1, args.repeat)):
        runs["a"].append(timed(lambda: plain_loop(cfg)))
        runs["b"].append(timed(lambda: run_inprocess(cfg)[0]))
        runs["b2"].append(timed(lambda: message_api_inprocess(cfg)))
    best = {k: (v[-1][0], min(r[1] for r in v), min(r[2] for r in v)) for k, v in runs.items()}
    (floor_w, floor_acc), floor_s, floor_cpu = best["a"]
    outcome_b, b_s, b_cpu = best["b"]
    (final_b2, acc_b2), b2_s, b2_cpu = best["b2"]
    rows = [
        ("(a) plain PyTorch loop", floor_s, floor_cpu, None, floor_acc, 0.0),
        ("(b) inprocess backend", b_s, b_cpu, None, [r["accuracy"] for r in outcome_b.rounds], max_diff(floor_w, outcome_b.final_arrays)),
        ("(b2) Message-API app, in-process grid", b2_s, b2_cpu, None, acc_b2, max_diff(floor_w, final_b2)),
    ]
    ray_timing = None
    if not args.skip_ray:
        from ..backends import run_ray

        outcome_c, ray_timing = run_ray(cfg)
        c_acc = [r["accuracy"] for r in outcome_c.rounds]
        # Ray starts its actors on the first message: count round 1's excess over the median of the
        # later rounds as start-up, so "rounds only" is comparable with (a) and (b).
        walls = [r["wall_s"] for r in outcome_c.rounds if r["round"] > 0]
        steady = float(np.median(walls[1:])) if len(walls) > 1 else walls[0]
        rounds_s = steady + sum(walls[1:])
        startup = ray_timing["total_s"] - rounds_s
        ray_timing = {**ray_timing, "steady_round_s": steady, "rounds_only_s": rounds_s, "startup_incl_actors_s": startup}
        rows.append(("(c) ray backend (flwr run), rounds only", rounds_s, None, startup, c_acc, max_diff(floor_w, outcome_c.final_arrays)))

    print()
    print("| path | wall s | ratio to (a) | CPU s (this process) | start-up s | final accuracy | max abs diff of final model vs (a) |")
    print("|---|---|---|---|---|---|---|")
    for name, s, cpu, startup, acc, diff in rows:
        st = f"{startup:.1f}" if startup is not None else "-"
        cpu_s = f"{cpu:.2f}" if cpu is not None else "-"
        print(f"| {name} | {s:.2f} | {s / floor_s:.2f}x | {cpu_s} | {st} | {acc[-1]:.4f} | {diff:.1e} |")
    per_msg = (b2_s - b_s) / (cfg.rounds * cfg.num_clients) * 1e3
    print(f"\nFlower message objects and serialisation, (b2) - (b): {per_msg:.2f} ms per client round")
    if ray_timing is not None:
        print(f"Flower's runtime per round, (c) steady round - (b2) per round: "
              f"{ray_timing['steady_round_s'] - b2_s / cfg.rounds:.2f} s; SuperLink start {ray_timing['superlink_start_s']:.1f} s, "
              f"simulation + Ray + actor start-up {startup - ray_timing['superlink_start_s']:.1f} s")
    same = all(r[5] == 0.0 for r in rows)
    print(f"same final model on every path: {same}")
    write_out(args.out, {"rows": [dict(zip(("path", "wall_s", "cpu_s", "startup_s", "accuracy", "max_diff"), r))
                                  for r in rows], "ray_timing": ray_timing, "same_model": same}, indent=2)
    return 0 if same else 1
