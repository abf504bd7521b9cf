"""Benchmarks of the decentralized server: memory at the papers' scale, and DFedCata's two modes.

``python -m simulations bench decentralized memory [--peers 100] [--params 11200000]
[--topology random] [--rounds 3] [--method dfedcata] [--dtype float32] [--out FILE.json]``

    DFedCata's paper shape (100 peers, ResNet-18-GN's 11.2M parameters, the random-10 graph) with
    synthetic models and a cheap local step (a contraction of the start point, in place), so it
    measures the server: the core's tables, start points, reply handling, mixing, the network
    average and the consensus distance. The peers are driven in-process one message at a time
    (one message in flight; ``--through legacy`` instead drives the legacy Flower adapter with all
    of a round's serialised messages in flight, as Flower's in-process server does). Runs in a fresh
    child process and prints its peak resident set size
    (``ru_maxrss``), that peak minus the RSS before the first table, in tables' worth (one table =
    peers x params x 4 bytes), and the seconds per round. ``--method dfedavg|dpsgd`` measures the
    baselines' cores. Refuses to start when the machine does not have the memory for it.

``python -m simulations bench decentralized modes [--data-dir DIR] [--clients 20] [--rounds 5]
[--official-dir DIR] [--out FILE.json]``

    DFedCata's synchronous mode vs the official-code-compatible ``sequential_inplace`` mode on
    the official code's small workload (MNIST MLP 784-200-200-10, 20 clients, Dirichlet 0.3,
    1 local epoch of batch 32, one thread), in-process backend, evaluation once per algorithm
    round in both. Prints wall-clock and CPU seconds per algorithm round and the ratio
    sequential / synchronous (CPU time is the fair figure on a shared machine). With
    ``--official-dir`` (a checkout of github.com/zzylyxx/DFedCata) it also runs the official code
    on the same data split in a child process and prints its seconds per round; without it, the
    issue's measured reference (2.41 s per round) is printed beside ours.

Both set ``OMP_NUM_THREADS=1`` when unset.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from . import ROOT, child_env, options, proc_kib, rss_kib, run_child, timed, write_out  # noqa: E402
OFFICIAL_REFERENCE_S = 2.41  # issue 15: official code, MNIST MLP, 20 clients, 1 epoch, batch 32, median s/round


# ----------------------------------------------------------------------------------- memory
#: model tables (peers x params) each method's core keeps
TABLES = {"dfedcata": 3, "dfedavg": 2, "dpsgd": 2}


def measure_memory(peers: int, params: int, topology: str, rounds: int, method: str, dtype: str, seed: int = 0,
                   through: str = "core") -> dict:
    """One run in this process (call it in a fresh process): peak RSS and seconds per round.
    ``through="core"`` drives the core one message at a time; ``"legacy"`` drives the legacy Flower
    adapter with every message of the round in flight (Flower's in-process server)."""
    import torch

    torch.set_num_threads(1)
    from flwr_strategies.core.messages import Reply
    from flwr_strategies.decentralized.config import GraphConfig
    from flwr_strategies.dfedcata.config import DFedCataConfig
    from flwr_strategies.dfedcata.server import DFedAvgServer, DFedCataServer, DPSGDServer

    from .aggregate import _contract

    base_kib = rss_kib()
    x0 = np.random.default_rng(seed).standard_normal(params).astype(dtype)
    graph = GraphConfig(topology=topology, client_eval_every=0)
    kw = dict(num_partitions=peers, graph=graph, seed=seed, on_train_config=lambda r: {"lr": 0.1}, dtype=dtype)
    t0 = time.perf_counter()
    servers = {"dfedcata": DFedCataServer, "dfedavg": DFedAvgServer, "dpsgd": DPSGDServer}
    if method not in servers:
        raise ValueError(f"unknown method {method!r}; use dfedcata, dfedavg or dpsgd")
    extra = {"config": DFedCataConfig(beta=0.99, lam=0.05)} if method == "dfedcata" else {}
    core = servers[method]([x0], **extra, **kw)
    del x0
    setup_s = time.perf_counter() - t0
    table = core.models.data.nbytes
    walls, cpus, links = [], [], []
    if through == "legacy":
        from flwr.common import ndarrays_to_parameters

        from flwr_strategies.adapters.legacy import LegacyStrategy

        from .aggregate import _client_manager, legacy_round

        manager = _client_manager(peers)  # Flower's SimpleClientManager; the peers report their partition-id
        strategy = LegacyStrategy(core_factory=lambda arrays, n: core, min_available_clients=peers,
                                  fraction_evaluate=0.0)
        parameters = ndarrays_to_parameters(core.global_arrays())
        for r in range(1, rounds + 1):
            w0, c0 = time.perf_counter(), time.process_time()
            parameters, metrics = legacy_round(strategy, manager, parameters, r, peers)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            links.append(int(metrics["links"]))
    for r in range(1, rounds + 1 if through == "core" else 1):
        w0, c0 = time.perf_counter(), time.process_time()
        pids = core.select(r, range(peers))
        # each peer contracts its start point in place (its arrays are views of the server's spare
        # row, so one message is in flight at a time and nothing is copied)
        replies = [Reply(ins.partition_id, _contract(ins.arrays, ins.partition_id, peers), 1, {"train_loss": 0.0})
                   for ins in core.configure_train(r, pids)]
        metrics = core.train_round(r, replies, sampled=pids, on_bad_reply="drop")
        core.global_arrays()  # the model a run evaluates
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        links.append(int(metrics["links"]))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "through": through, "peers": peers, "params": params, "topology": topology,
            "rounds": rounds, "dtype": dtype, "table_bytes": table, "tables_held": TABLES[method],
            "baseline_rss_bytes": base_kib * 1024, "peak_rss_bytes": peak_kib * 1024,
            "tables_worth": (peak_kib - base_kib) * 1024 / table, "setup_s": setup_s,
            "s_per_round": float(np.median(walls)), "cpu_s_per_round": float(np.median(cpus)), "wall_s_rounds": walls,
            "links_per_round": float(np.mean(links)), "consensus_distance": float(core.consensus_distance())}


def cmd_memory(args: argparse.Namespace) -> dict:
    table = args.peers * args.params * np.dtype(args.dtype).itemsize
    need = (TABLES[args.method] + (3 if args.through == "legacy" else 0) + 0.3) * table
    if args.child:
        res = measure_memory(args.peers, args.params, args.topology, args.rounds, args.method, args.dtype,
                             through=args.through)
        print(json.dumps(res))
        return res
    avail = proc_kib("/proc/meminfo", "MemAvailable") * 1024
    if need > avail and not args.force:
        raise SystemExit(f"needs about {need / 2**30:.1f} GiB ({TABLES[args.method]} tables of "
                         f"{table / 2**30:.2f} GiB) but only {avail / 2**30:.1f} GiB is available now; retry later, "
                         "lower --peers/--params, or pass --force")
    res = run_child(["decentralized", "memory", "--child", "--peers", str(args.peers), "--params", str(args.params),
                     "--topology", args.topology, "--rounds", str(args.rounds), "--method", args.method, "--dtype",
                     args.dtype, "--through", args.through], "the measurement", env=child_env(), cwd=ROOT)
    gib = 2**30
    print(f"{res['method']} through the {res['through']}: {res['peers']} peers x {res['params']:,} params ({res['dtype']}), {res['topology']} graph "
          f"({res['links_per_round']:.0f} links/round), {res['rounds']} rounds; one table = {res['table_bytes'] / gib:.2f} GiB\n")
    print("| peak RSS (GiB) | RSS before the tables (GiB) | peak - before, tables' worth | tables the method keeps | s/round (wall) | CPU s/round |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {res['peak_rss_bytes'] / gib:.2f} | {res['baseline_rss_bytes'] / gib:.2f} | {res['tables_worth']:.2f} | "
          f"{res['tables_held']} | {res['s_per_round']:.2f} | {res['cpu_s_per_round']:.2f} |")
    return res


# ----------------------------------------------------------------------------------- modes
def _modes_cfg(args: argparse.Namespace, sequential: bool):
    from flwr_strategies.simulations.experiment import ExperimentConfig

    params = {"beta": args.beta, "lam": 0.05, "neighbours": args.neighbours}
    if sequential:
        params.update(sequential_inplace=True, extrapolation_anchor="prev_local")
    return ExperimentConfig(method="dfedcata", dataset="mnist", data_dir=args.data_dir, model="mlp",
                            num_clients=args.clients, rounds=args.rounds * (args.clients if sequential else 1),
                            partition="dirichlet", alpha=0.3, lr=0.1, lr_decay=0.998, local_epochs=1, batch_size=32,
                            weight_decay=5e-4, grad_clip=10.0, seed=args.seed, progress=False, params=params)


def _time_run(cfg) -> dict:
    from flwr_strategies.simulations.experiment import get_experiment
    from flwr_strategies.simulations.runner import run_experiment

    get_experiment(cfg)  # data, partition and model built before the clock starts
    res, wall, cpu = timed(lambda: run_experiment(cfg))
    return {"wall_s": wall, "cpu_s": cpu,
            "final_accuracy": res["summary"]["final_accuracy"],
            "evaluations": sum(1 for r in res["rounds"] if r.get("accuracy") is not None)}


def official_child(args: argparse.Namespace) -> dict:
    """Run the official DFedCata server (imported from ``--official-dir``, not copied) on the same
    MNIST split our runs use: batch 32, 1 local epoch, its random graph with ``neighbours``."""
    import contextlib
    import io
    import types

    import torch

    from flwr_strategies.simulations.experiment import get_experiment

    torch.set_num_threads(1)
    exp = get_experiment(_modes_cfg(args, sequential=False))
    task = exp.task
    shards = [task.client_data(pid)[0] for pid in range(args.clients)]
    cx = [data.x.numpy().reshape(len(data), 1, 28, 28) for data in shards]
    cy = [data.y.numpy().reshape(-1, 1).astype(np.float32) for data in shards]
    test = task.test
    tx, ty = test.x.numpy().reshape(len(test), 1, 28, 28), test.y.numpy().reshape(-1, 1).astype(np.float32)
    sys.path.insert(0, args.official_dir)
    with contextlib.chdir(args.official_dir):
        from server import DFedCata  # noqa: the official code's module
        from utils import get_mdl_params

        from models import client_model  # type: ignore
    data = types.SimpleNamespace(client_x=cx, client_y=cy, test_x=tx, test_y=ty)
    official_args = types.SimpleNamespace(
        dataset="mnist", model="mnist_2NN", non_iid=True, split_rule="Dirichlet", split_coef=0.3, cs="random",
        active_ratio=args.neighbours / args.clients, total_client=args.clients, comm_rounds=args.rounds,
        local_epochs=1, batchsize=32, weight_decay=5e-4, local_learning_rate=0.1, lr_decay=0.998, seed=args.seed,
        cuda=0, data_file="./", out_file=os.path.join("/tmp", "dfedcata-official-out"), mu=0.9, beta=args.beta,
        rho=0.0, lamb=0.05, momentum=0.0, method="DFedCata")
    torch.manual_seed(args.seed)
    model_func = lambda: client_model("mnist_2NN")  # noqa: E731
    init = model_func()
    server = DFedCata(device=torch.device("cpu"), model_func=model_func, init_model=init,
                      init_par_list=get_mdl_params(init), datasets=data, method="DFedCata", args=official_args)
    server._save_results_ = lambda: None
    with contextlib.redirect_stdout(io.StringIO()):
        _, wall, cpu = timed(server.train)
    return {"wall_s": wall, "cpu_s": cpu,
            "median_round_s": float(np.median(server.time)), "best_accuracy": float(np.max(server.test_perf[:, 1]))}


def cmd_modes(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(1)
    if not args.data_dir:
        default = ROOT.parent / "shared" / "data" / "mnist"
        if not (default / "t10k-images-idx3-ubyte.gz").exists():
            raise SystemExit("pass --data-dir with the MNIST idx files")
        args.data_dir = str(default)
    warm = argparse.Namespace(**{**vars(args), "rounds": 1})
    _time_run(_modes_cfg(warm, sequential=False))  # warm-up: first torch calls, data caches, allocator
    sync = seq = None
    for _ in range(args.repeat):  # best of --repeat (the machine may be shared)
        a, b = _time_run(_modes_cfg(args, sequential=False)), _time_run(_modes_cfg(args, sequential=True))
        sync = a if sync is None or a["cpu_s"] < sync["cpu_s"] else sync
        seq = b if seq is None or b["cpu_s"] < seq["cpu_s"] else seq
    T = args.rounds
    out = {"rounds": T, "clients": args.clients, "sync": sync, "sequential": seq,
           "sync_s_per_round": sync["wall_s"] / T, "sequential_s_per_round": seq["wall_s"] / T,
           "sync_cpu_s_per_round": sync["cpu_s"] / T, "sequential_cpu_s_per_round": seq["cpu_s"] / T}
    out["ratio_wall"] = out["sequential_s_per_round"] / out["sync_s_per_round"]
    out["ratio_cpu"] = out["sequential_cpu_s_per_round"] / out["sync_cpu_s_per_round"]
    if args.official_dir:
        # the official code's DFedCata server on our MNIST split, in a child process
        off = out["official"] = run_child(
            ["decentralized", "official-child", "--official-dir", args.official_dir, "--data-dir", args.data_dir,
             "--clients", str(args.clients), "--rounds", str(args.rounds), "--seed", str(args.seed), "--beta",
             str(args.beta), "--neighbours", str(args.neighbours)], "the official code", env=child_env(), cwd=ROOT)
        official_line = (f"official code (measured here, same split): {off['wall_s'] / T:.2f} s/round wall, "
                         f"{off['cpu_s'] / T:.2f} CPU s/round (median round {off['median_round_s']:.2f} s)")
    else:
        out["official"] = {"reference_s_per_round": OFFICIAL_REFERENCE_S}
        official_line = (f"official code: {OFFICIAL_REFERENCE_S:.2f} s/round (issue 15's measurement on this machine's "
                         "workload; pass --official-dir to run it here)")
    print(f"DFedCata, MNIST MLP 784-200-200-10, {args.clients} clients, 1 epoch of batch 32, {T} algorithm rounds, "
          "in-process backend, one thread\n")
    print("| mode | Flower rounds | s / algorithm round (wall) | CPU s / algorithm round | evaluations | final acc |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| synchronous | {T} | {out['sync_s_per_round']:.2f} | {out['sync_cpu_s_per_round']:.2f} | "
          f"{sync['evaluations']} | {sync['final_accuracy']:.4f} |")
    print(f"| sequential_inplace | {T * args.clients} | {out['sequential_s_per_round']:.2f} | "
          f"{out['sequential_cpu_s_per_round']:.2f} | {seq['evaluations']} | {seq['final_accuracy']:.4f} |")
    print(f"\nsequential / synchronous: {out['ratio_wall']:.2f}x wall, {out['ratio_cpu']:.2f}x CPU (goal <= 1.2x)")
    print(official_line)
    return out


# ----------------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulations bench decentralized", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("memory", help="server memory and time at the paper's shape")
    options(m, peers=100, topology="random", rounds=3, out=None)
    m.add_argument("--params", type=int, default=11_200_000, help="model size d (ResNet-18-GN: 11.2M)")
    m.add_argument("--method", default="dfedcata", choices=("dfedcata", "dfedavg", "dpsgd"))
    m.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    m.add_argument("--through", default="core", choices=("core", "legacy"),
                   help="core: one message in flight; legacy: Flower's legacy adapter, all messages of a round in flight")
    m.add_argument("--force", action="store_true", help="run even if the machine seems short of memory")
    m.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name, helptext in (("modes", "synchronous vs sequential_inplace s/round"), ("official-child", argparse.SUPPRESS)):
        q = sub.add_parser(name, help=helptext)
        q.add_argument("--data-dir", help="MNIST idx files (default: ../shared/data/mnist)")
        options(q, clients=20, beta=0.9, seed=0, out=None)
        q.add_argument("--rounds", type=int, default=5, help="algorithm rounds")
        q.add_argument("--neighbours", type=int, default=2, help="random graph picks per peer (official: 0.1 x clients)")
        q.add_argument("--official-dir", help="checkout of github.com/zzylyxx/DFedCata to run and time")
        q.add_argument("--repeat", type=int, default=1, help="time each mode this many times, keep the fastest")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.what == "official-child":
        print(json.dumps(official_child(args)))
        return 0
    res = cmd_memory(args) if args.what == "memory" else cmd_modes(args)
    if not getattr(args, "child", False):
        write_out(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
