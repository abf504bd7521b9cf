"""Command line: ``python -m simulations {run,list,compare,bench}``."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

# CLI flag -> ExperimentConfig field, for flags whose default is "not given"
_FIELDS = (
    "dataset", "data_dir", "num_clients", "rounds", "seed", "data_seed", "partition", "alpha",
    "classes_per_client", "fraction_fit", "lr", "local_epochs", "local_steps", "batch_size",
    "weight_decay", "momentum", "lr_decay", "model", "backend", "device", "client_cpus",
    "client_gpus", "client_threads",
)


def _parse_set(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"--set expects key=value, got '{item}'")
        k, v = item.split("=", 1)
        out[k.strip().replace("-", "_")] = v.strip()
    return out


def _add_experiment_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("experiment")
    g.add_argument("--dataset", help="digits (default), mnist, cifar10, cifar100, synthetic")
    g.add_argument("--data-dir", help="folder with the dataset files (mnist, cifar)")
    g.add_argument("--num-clients", type=int)
    g.add_argument("--rounds", type=int)
    g.add_argument("--seed", type=int)
    g.add_argument("--data-seed", type=int, help="seed of the train/test split and partition (default: --seed)")
    g.add_argument("--partition", help="iid (default), dirichlet, dirichlet-class, pathological, label-count, natural")
    g.add_argument("--alpha", type=float, help="Dirichlet concentration")
    g.add_argument("--classes-per-client", type=int, help="classes per client for pathological/label-count")
    g.add_argument("--fraction-fit", type=float, help="fraction of clients sampled per round")
    g.add_argument("--lr", type=float)
    g.add_argument("--local-epochs", type=int)
    g.add_argument("--local-steps", type=int, help="local steps K (overrides epochs)")
    g.add_argument("--batch-size", type=int)
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--momentum", type=float)
    g.add_argument("--lr-decay", type=float, help="per-round learning-rate decay")
    g.add_argument("--model", help="logreg, mlp, cnn_mnist, cnn_svhn, cnn_cifar, lenet_cifar, resnet18_gn")
    g.add_argument("--backend", choices=("inprocess", "ray"))
    g.add_argument("--device", help="cpu (default) or cuda[:N]: where clients train")
    g.add_argument("--client-cpus", type=float, help="Ray CPUs per client (default 1)")
    g.add_argument("--client-gpus", type=float, help="Ray GPUs per client, fractional allowed (default 0)")
    g.add_argument("--client-threads", type=int, help="torch threads per client (default 1)")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="method hyperparameter")
    g.add_argument("--fail", action="append", default=[], metavar="ROUND:PARTITION", help="inject a client failure")
    g.add_argument("--quiet", action="store_true", help="no progress bar")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    if args.set:
        out["params"] = _parse_set(args.set)
    if args.fail:
        out["fail"] = list(args.fail)
    if args.quiet:
        out["progress"] = False
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from .compare import merge_config
    from .experiment import ExperimentConfig
    from .runner import run_experiment

    conf = merge_config({"method": args.method}, _overrides(args))
    conf["out"] = args.out
    res = run_experiment(ExperimentConfig.from_dict(conf), verbose=args.verbose)
    s = res["summary"]
    print(
        f"{res['method']}: final accuracy {s['final_accuracy']:.4f}, best {s['best_accuracy']:.4f}, "
        f"{s['rounds']} rounds, up {s['bytes_up_per_round']:.0f} B/round, down {s['bytes_down_per_round']:.0f} B/round, "
        f"failures {s['failures']}, {res['timing']['wall_s']:.1f} s"
    )
    if args.out:
        print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from flwr_strategies.registry import list_methods

    from .datasets import DATASETS
    from .partition import PARTITIONS
    from .presets import list_presets

    print("methods:")
    for name, spec in list_methods().items():
        print(f"  {name:<16} {spec.summary}")
    print("datasets:")
    for name in DATASETS:
        print(f"  {name}")
    print("partitions:")
    print("  " + ", ".join(PARTITIONS))
    print("presets:")
    for name, preset in list_presets().items():
        print(f"  {name:<16} {preset.summary}")
    import flwr_strategies.simulations.bench as bench

    names = [m.name for m in pkgutil.iter_modules(bench.__path__)]
    print("benchmarks:")
    print("  " + (", ".join(names) if names else "(none)"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import run_entries, run_preset
    from .presets import Preset, RunEntry, get_preset

    overrides = _overrides(args)
    if bool(args.preset) == bool(args.methods):
        raise SystemExit("compare needs exactly one of --preset P or --methods a,b,...")
    if args.preset:
        preset = get_preset(args.preset)
        out = Path(args.out or f"runs/{preset.name}")
        run_preset(preset, overrides, out, overrides.get("backend", "inprocess"))
    else:
        from flwr_strategies.registry import get_method

        names = [m.strip() for m in args.methods.split(",") if m.strip()]
        for m in names:
            get_method(m)
        entries = [RunEntry(m, m) for m in names]
        out = Path(args.out or "runs/compare")
        run_entries(entries, {}, overrides, out, target=args.target, title="compare " + ", ".join(names))
    return 0


def cmd_bench(argv: list[str]) -> int:
    import flwr_strategies.simulations.bench as bench

    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__))
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m simulations bench NAME [args]; benchmarks: " + ", ".join(names))
        return 0
    if argv[0] not in names:
        raise SystemExit(f"unknown benchmark '{argv[0]}'; valid benchmarks: {', '.join(names)}")
    module = importlib.import_module(f"flwr_strategies.simulations.bench.{argv[0]}")
    return int(module.main(argv[1:]) or 0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulations", description="flwr-strategies simulations")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run one method")
    p_run.add_argument("--method", required=True)
    p_run.add_argument("--out", help="folder for results.json")
    p_run.add_argument("--verbose", action="store_true", help="show Flower's log")
    _add_experiment_flags(p_run)
    sub.add_parser("list", help="list methods, datasets and presets")
    p_cmp = sub.add_parser("compare", help="compare methods on one partition and seed")
    p_cmp.add_argument("--preset")
    p_cmp.add_argument("--methods", help="comma-separated method names")
    p_cmp.add_argument("--target", type=float, help="target accuracy for rounds-to-target (with --methods)")
    p_cmp.add_argument("--out", help="output folder (default runs/<preset>)")
    _add_experiment_flags(p_cmp)
    sub.add_parser("bench", help="run a benchmark: bench NAME [args]", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return cmd_bench(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "compare":
            return cmd_compare(args)
    except (KeyError, ValueError, FileNotFoundError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        print(f"error: {msg}", file=sys.stderr)
        return 2
    return 1
