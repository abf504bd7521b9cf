"""Aggregation at Flower's cost: this library's strategies against Flower's on the same replies.

``docs/performance.md`` ("Aggregation at Flower's cost") describes each measurement and its results.

``python -m simulations bench aggregate [fedavg] [--replies 100] [--params 1000000] [--arrays 10]
[--repeats 7] [--out FILE.json]``

    This library's FedAvg against Flower's own FedAvg of the same API (``aggregate_fit`` /
    ``aggregate_train`` only, on replies built beforehand as Flower's runtime hands them over), in
    one process, alternating over ``--repeats`` runs: median wall and CPU seconds per call, the
    call's peak allocation (``tracemalloc``) in MB and in models, the ratios, and how far each
    result is from Flower's.

``python -m simulations bench aggregate dfedcata [--peers 50] [--params 2000000] [--rounds 2]
[--api all|legacy|message|start] [--out FILE.json]``

    DFedCata through each Flower adapter (``start``: Flower's own ``Strategy.start()`` on an
    in-process grid) with every message of a round in flight, as Flower holds them; the peers'
    local step is a cheap contraction of their start point. Each adapter runs in a fresh child
    process: peak RSS above the RSS before the strategy was built (``ru_maxrss``) and peak
    allocation (``tracemalloc``), in model tables (one table = peers x params x 4 bytes).

``python -m simulations bench aggregate scaffold [--replies 100] [--params 1000000] [--arrays 10]
[--repeats 5] [--out FILE.json]``

    SCAFFOLD's server step (:func:`~flwr_strategies.fedli.scaffold.scaffold_server_update`, the
    paper's uniform weighting: ``w <- mean_i w_i``, ``c <- c + (S/N) mean_i dc_i``) against a
    streaming NumPy step written here (float64 accumulators, one reply added at a time), measured
    as FedAvg's.

All set ``OMP_NUM_THREADS=1`` when unset.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import resource
import statistics
import sys
import time
import tracemalloc
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from . import max_diff, options, rss_kib, run_child, timed, write_out  # noqa: E402

__all__ = ["measure_fedavg", "measure_dfedcata", "measure_scaffold", "main"]

MB = 2**20


@contextlib.contextmanager
def _quiet_flower():
    """Flower's per-call INFO/WARNING lines would swamp the tables: silence them while measuring."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _layout(params: int, arrays: int) -> list[int]:
    """Sizes of ``arrays`` arrays holding ``params`` parameters together."""
    if params < arrays or arrays < 1:
        raise SystemExit(f"--params ({params}) must be >= --arrays ({arrays}) >= 1")
    return [len(part) for part in np.array_split(np.arange(params), arrays)]


def _client_models(replies: int, params: int, arrays: int, seed: int):
    """Each client's model (float32) and example count, one at a time (seeded)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(20, 201, size=replies)
    for i in range(replies):
        yield [rng.standard_normal(n, dtype=np.float32) for n in _layout(params, arrays)], int(counts[i])


def _peak(call) -> int:
    """Peak bytes allocated while ``call`` runs (what it keeps and what it frees again)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------ legacy API
def _client_manager(n: int):
    """Flower's client manager with ``n`` connected clients that report their ``partition-id``."""
    from flwr.common import Code, GetPropertiesRes, Status
    from flwr.server import SimpleClientManager
    from flwr.server.client_proxy import ClientProxy

    class Proxy(ClientProxy):
        def __init__(self, pid: int) -> None:
            super().__init__(f"client-{pid}")
            self.pid = pid

        def get_properties(self, ins, timeout, group_id):
            return GetPropertiesRes(Status(Code.OK, ""), {"partition-id": self.pid})

        def _unused(self, ins, timeout, group_id):
            raise NotImplementedError

        get_parameters = fit = evaluate = reconnect = _unused

    manager = SimpleClientManager()
    for pid in range(n):
        manager.register(Proxy(pid))
    return manager


def _legacy_fedavg(replies: int, params: int, arrays: int, repeats: int, seed: int) -> dict[str, Any]:
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg as FlowerFedAvg

    from flwr_strategies import FedAvg

    manager = _client_manager(replies)
    proxies = sorted(manager.all().values(), key=lambda p: p.pid)
    initial = ndarrays_to_parameters([np.zeros(n, np.float32) for n in _layout(params, arrays)])
    results = [(proxies[i], FitRes(Status(Code.OK, ""), ndarrays_to_parameters(model), count, {}))
               for i, (model, count) in enumerate(_client_models(replies, params, arrays, seed))]
    ours = FedAvg(initial_parameters=initial, fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=replies,
                  min_available_clients=replies)
    flower = FlowerFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=replies,
                          min_available_clients=replies)
    rnd = [0]

    def prepare_ours():
        rnd[0] += 1
        ours.configure_fit(rnd[0], initial, manager)  # the round's sample (untimed)
        return lambda: ours.aggregate_fit(rnd[0], results, [])[0]

    def prepare_flower():
        return lambda: flower.aggregate_fit(1, results, [])[0]

    out = _compare(prepare_ours, prepare_flower, repeats)
    out["max_abs_diff"] = max_diff(parameters_to_ndarrays(prepare_ours()()), parameters_to_ndarrays(prepare_flower()()))
    return out


# ------------------------------------------------------------------------------ Message API
def _client_app(reply):
    """A ClientApp that answers the partition query and trains with ``reply(msg, partition_id)``
    (the reply's ``RecordDict``)."""
    from flwr.app import Message
    from flwr.clientapp import ClientApp

    from flwr_strategies.clients.app import partition_query

    app = ClientApp()
    app.query("partition")(partition_query)
    app.train()(lambda msg, context: Message(reply(msg, int(context.node_config["partition-id"])), reply_to=msg))
    return app


def _message_fedavg(replies: int, params: int, arrays: int, repeats: int, seed: int) -> dict[str, Any]:
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

    from flwr_strategies.serverapp import FedAvg
    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    contents = {i: RecordDict({"arrays": ArrayRecord(model), "metrics": MetricRecord({"num-examples": count})})
                for i, (model, count) in enumerate(_client_models(replies, params, arrays, seed))}
    grid = InProcessGrid(_client_app(lambda msg, pid: contents[pid]), replies)
    initial = ArrayRecord([np.zeros(n, np.float32) for n in _layout(params, arrays)])
    ours = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=replies, min_evaluate_nodes=0,
                  min_available_nodes=replies)
    flower = FlowerFedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=replies,
                          min_available_nodes=replies)
    # the replies, as Flower's runtime hands them to aggregate_train (built once, reused by both)
    answered = list(grid.send_and_receive(ours.configure_train(1, initial, ConfigRecord(), grid)))
    rnd = [1]

    def prepare_ours():
        rnd[0] += 1
        ours.configure_train(rnd[0], initial, ConfigRecord(), grid)  # the round's sample (untimed)
        return lambda: ours.aggregate_train(rnd[0], answered)[0]

    def prepare_flower():
        return lambda: flower.aggregate_train(1, answered)[0]

    out = _compare(prepare_ours, prepare_flower, repeats)
    out["max_abs_diff"] = max_diff(prepare_ours()().to_numpy_ndarrays(), prepare_flower()().to_numpy_ndarrays())
    return out


def _compare(prepare_ours, prepare_other, repeats: int, other: str = "flower") -> dict[str, Any]:
    """Alternate the two (order flipped every run); then one traced run of each for the peak.
    ``prepare_*()`` returns the call to time; the second one's results are under ``other``."""
    times: dict[str, list[tuple[float, float]]] = {"ours": [], other: []}
    for i in range(repeats):
        order = (("ours", prepare_ours), (other, prepare_other))
        for name, prepare in (order if i % 2 == 0 else order[::-1]):
            times[name].append(timed(prepare())[1:])
    return {name: {"wall_s": statistics.median(t[0] for t in times[name]),
                   "cpu_s": statistics.median(t[1] for t in times[name]),
                   "wall_s_runs": [t[0] for t in times[name]], "peak_bytes": _peak(prepare())}
            for name, prepare in (("ours", prepare_ours), (other, prepare_other))}


def measure_fedavg(replies: int = 100, params: int = 1_000_000, arrays: int = 10, repeats: int = 7,
                   seed: int = 0) -> dict[str, Any]:
    """Both APIs, this library's FedAvg against Flower's, in this process."""
    res = {"replies": replies, "params": params, "arrays": arrays, "repeats": repeats, "model_bytes": params * 4}
    with _quiet_flower():
        res["legacy"] = _legacy_fedavg(replies, params, arrays, repeats, seed)
        gc.collect()
        res["message"] = _message_fedavg(replies, params, arrays, repeats, seed)
    return res


def print_fedavg(res: dict[str, Any]) -> None:
    model = res["model_bytes"]
    print(f"FedAvg aggregation: {res['replies']} replies of a {res['params']:,}-parameter float32 model "
          f"({res['arrays']} arrays, one model = {model / MB:.1f} MB); median of {res['repeats']} runs, one process\n")
    print("| API | strategy | s / call (wall) | CPU s / call | peak allocated (MB) | peak (models) |")
    print("|---|---|---:|---:|---:|---:|")
    for api, flower_name in (("legacy", "flwr.server.strategy.FedAvg"), ("message", "flwr.serverapp.strategy.FedAvg")):
        ours_name = "flwr_strategies.FedAvg" if api == "legacy" else "flwr_strategies.serverapp.FedAvg"
        for who, name in (("ours", ours_name), ("flower", flower_name)):
            r = res[api][who]
            print(f"| {api} | {name} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['peak_bytes'] / MB:.0f} | "
                  f"{r['peak_bytes'] / model:.2f} |")
    print("\n| API | time, ours / Flower (wall) | time (CPU) | peak memory, ours / Flower | max abs diff from Flower |")
    print("|---|---:|---:|---:|---:|")
    for api in ("legacy", "message"):
        o, f = res[api]["ours"], res[api]["flower"]
        print(f"| {api} | {o['wall_s'] / f['wall_s']:.2f}x | {o['cpu_s'] / f['cpu_s']:.2f}x | "
              f"{o['peak_bytes'] / f['peak_bytes']:.2f}x | {res[api]['max_abs_diff']:.2e} |")


# ------------------------------------------------------------------------------ DFedCata
def _contract(arrays: list[np.ndarray], pid: int, peers: int) -> list[np.ndarray]:
    """The peer's local step: a contraction of its start point towards its own target, in place."""
    target = np.float32(pid / peers)
    for a in arrays:
        a *= np.float32(0.9)
        a += np.float32(0.1) * target
    return arrays


def legacy_round(strategy, manager, parameters, r: int, peers: int):
    """One round as Flower's legacy ``Server.fit_round`` holds it: every (serialised) ``FitIns`` of
    the round, then every ``FitRes`` of the contracting peers, until ``aggregate_fit`` returns the new
    global model (kept, as Flower keeps it) and the round's metrics."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    instructions = strategy.configure_fit(r, parameters, manager)
    results = []
    for proxy, fit_ins in instructions:
        arrays = _contract(parameters_to_ndarrays(fit_ins.parameters), proxy.pid, peers)
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1,
                                      {"partition-id": proxy.pid})))
        del arrays
    out = strategy.aggregate_fit(r, results, [])
    del instructions, results
    return out


def _dfedcata_message_round(strategy, grid, initial, r: int, peers: int):
    """One round as Flower's ``Strategy.start`` holds it: the round's instruction messages and
    every reply, until ``aggregate_train`` returns (the new global model, as Flower keeps it)."""
    from flwr.app import ConfigRecord, Message

    instructions = list(strategy.configure_train(r, initial, ConfigRecord(), grid))
    replies = [Message(_contracted(msg, strategy.partition_of_node[msg.metadata.dst_node_id], peers), reply_to=msg)
               for msg in instructions]
    arrays, _ = strategy.aggregate_train(r, replies)
    del instructions, replies
    return arrays


def _contracted(msg, pid: int, peers: int):
    """A peer's reply: the contraction of the arrays ``msg`` carries."""
    from flwr.app import ArrayRecord, MetricRecord, RecordDict

    arrays = _contract(next(iter(msg.content.array_records.values())).to_numpy_ndarrays(), pid, peers)
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 1, "partition-id": pid})})


@_quiet_flower()
def measure_dfedcata(api: str, peers: int = 50, params: int = 2_000_000, rounds: int = 2,
                     seed: int = 0) -> dict[str, Any]:
    """One adapter in this process (call it in a fresh process): peak memory in model tables."""
    import torch  # noqa: F401 (the mixing step imports it on first use: not the strategy's memory)

    if api not in ("legacy", "message", "start"):
        raise SystemExit(f"unknown --api {api!r}; use legacy, message or start")
    from flwr.app import ArrayRecord

    from flwr_strategies import DFedCata as LegacyDFedCata
    from flwr_strategies.serverapp import DFedCata as MessageDFedCata
    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    x0 = np.random.default_rng(seed).standard_normal(params, dtype=np.float32)
    table = peers * params * 4
    gc.collect()
    base_kib = rss_kib()  # everything imported, the initial model built: the strategy's memory from here
    tracemalloc.start()
    walls = []
    if api == "legacy":
        manager = _client_manager(peers)
        strategy = LegacyDFedCata(min_available_clients=peers, fraction_evaluate=0.0, initial_parameters=[x0],
                                  seed=seed)
        parameters = strategy.initialize_parameters(manager)
        for r in range(1, rounds + 1):
            w0 = time.perf_counter()
            parameters = legacy_round(strategy, manager, parameters, r, peers)[0]
            walls.append(time.perf_counter() - w0)
    elif api == "start":
        grid = InProcessGrid(_client_app(lambda msg, pid: _contracted(msg, pid, peers)), peers)
        strategy = MessageDFedCata(min_available_nodes=peers, fraction_evaluate=0.0, min_evaluate_nodes=0, seed=seed)
        w0 = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):
            strategy.start(grid=grid, initial_arrays=ArrayRecord([x0]), num_rounds=rounds)
        walls.append((time.perf_counter() - w0) / rounds)
    else:
        grid = InProcessGrid(_client_app(None), peers)
        initial = ArrayRecord([x0])
        strategy = MessageDFedCata(min_available_nodes=peers, fraction_evaluate=0.0, min_evaluate_nodes=0, seed=seed)
        for r in range(1, rounds + 1):
            w0 = time.perf_counter()
            initial = _dfedcata_message_round(strategy, grid, initial, r, peers)
            walls.append(time.perf_counter() - w0)
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"api": api, "peers": peers, "params": params, "rounds": rounds, "table_bytes": table,
            "rss_tables": (peak_kib - base_kib) * 1024 / table, "traced_tables": traced_peak / table,
            "s_per_round": float(np.median(walls))}


def _dfedcata_cmd(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        res = measure_dfedcata(args.api, args.peers, args.params, args.rounds)
        print(json.dumps(res))
        return res
    apis = ("legacy", "message", "start") if args.api == "all" else (args.api,)
    out: dict[str, Any] = {}
    for api in apis:
        out[api] = run_child(["aggregate", "dfedcata", "--child", "--api", api, "--peers", str(args.peers), "--params",
                              str(args.params), "--rounds", str(args.rounds)], f"the {api} measurement")
    first = out[apis[0]]
    print(f"DFedCata, {first['peers']} peers x {first['params']:,} params (float32), every message of a round in "
          f"flight, {first['rounds']} rounds; one table = {first['table_bytes'] / MB:.0f} MB\n")
    print("| adapter | peak RSS above the start (tables) | peak allocated, tracemalloc (tables) | s / round |")
    print("|---|---:|---:|---:|")
    for api in apis:
        r = out[api]
        print(f"| {api} | {r['rss_tables']:.2f} | {r['traced_tables']:.2f} | {r['s_per_round']:.2f} |")
    return out


# ------------------------------------------------------------------------------ SCAFFOLD
def _streaming_scaffold_step(models, dcs, c_global, num_clients: int):
    """The reference: ``mean_i w_i`` and ``c + (S/N) mean_i dc_i`` with float64 accumulators, one
    reply added at a time (the least a streaming server step can hold: the accumulators)."""
    s = len(models)
    new_w = [np.zeros(a.shape, np.float64) for a in models[0]]
    new_c = [np.zeros(c.shape, np.float64) for c in c_global]
    for model, dc in zip(models, dcs):
        for acc, a in zip(new_w, model):
            acc += a
        for acc, d in zip(new_c, dc):
            acc += d
    w = [(acc / s).astype(np.float32) for acc in new_w]
    c = [(acc * (1.0 / num_clients) + c0).astype(np.float32) for acc, c0 in zip(new_c, c_global)]
    return w, c


def measure_scaffold(replies: int = 100, params: int = 1_000_000, arrays: int = 10, repeats: int = 5,
                     seed: int = 0) -> dict[str, Any]:
    """Our SCAFFOLD server step against :func:`_streaming_scaffold_step` on the same replies."""
    from flwr_strategies.fedli.scaffold import scaffold_server_update

    rng = np.random.default_rng(seed)
    sizes = _layout(params, arrays)
    w0 = [rng.standard_normal(n, dtype=np.float32) for n in sizes]
    c0 = [np.zeros(n, np.float32) for n in sizes]
    models = [[rng.standard_normal(n, dtype=np.float32) for n in sizes] for _ in range(replies)]
    dcs = [[rng.standard_normal(n, dtype=np.float32) for n in sizes] for _ in range(replies)]
    num_clients = 2 * replies
    ours = lambda: scaffold_server_update(w0, c0, models, dcs, num_clients)  # noqa: E731
    numpy = lambda: _streaming_scaffold_step(models, dcs, c0, num_clients)  # noqa: E731
    out = _compare(lambda: ours, lambda: numpy, repeats, "numpy")
    (ow, oc), (rw, rc) = ours(), numpy()
    out.update({"replies": replies, "params": params, "arrays": arrays, "model_bytes": params * 4,
                "max_abs_diff": max(max_diff(ow, rw), max_diff(oc, rc))})
    out.update({f"{name}_ratio": out["ours"][key] / out["numpy"][key]
                for name, key in (("time", "wall_s"), ("cpu", "cpu_s"), ("peak", "peak_bytes"))})
    return out


def print_scaffold(res: dict[str, Any]) -> None:
    print(f"SCAFFOLD server step (uniform weighting), {res['replies']} replies x {res['params']:,} params "
          f"(float32) + their control updates; one model = {res['model_bytes'] / MB:.1f} MB\n")
    print("| step | wall s (median) | CPU s (median) | peak allocated MB (models) |")
    print("|---|---:|---:|---:|")
    for who, label in (("ours", "flwr_strategies scaffold_server_update"), ("numpy", "streaming NumPy step")):
        r = res[who]
        print(f"| {label} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['peak_bytes'] / MB:.1f} "
              f"({r['peak_bytes'] / res['model_bytes']:.2f}) |")
    print(f"\nours / NumPy: time {res['time_ratio']:.2f}x, CPU {res['cpu_ratio']:.2f}x, peak {res['peak_ratio']:.2f}x; "
          f"largest difference {res['max_abs_diff']:.2e}")


# ------------------------------------------------------------------------------ CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulations bench aggregate", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what")
    for name, repeats, text in (("fedavg", 7, "FedAvg aggregate_train/aggregate_fit against Flower's (default)"),
                                ("scaffold", 5, "SCAFFOLD's server step against a streaming NumPy step")):
        f = sub.add_parser(name, help=text)
        options(f, replies=100, params=1_000_000, arrays=10, repeats=repeats, seed=0, out=None)
    d = sub.add_parser("dfedcata", help="DFedCata through both adapters, a round's messages in flight")
    options(d, peers=50, params=2_000_000, rounds=2, out=None)
    d.add_argument("--api", default="all", choices=("all", "legacy", "message", "start"))
    d.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["fedavg", *argv]
    args = _parser().parse_args(argv)
    if args.what == "dfedcata":
        res = _dfedcata_cmd(args)
    elif args.what == "scaffold":
        res = measure_scaffold(args.replies, args.params, args.arrays, args.repeats, args.seed)
        print_scaffold(res)
    else:
        res = measure_fedavg(args.replies, args.params, args.arrays, args.repeats, args.seed)
        print_fedavg(res)
    if not getattr(args, "child", False):
        write_out(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
