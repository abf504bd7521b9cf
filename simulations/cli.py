"""Command line: ``python -m simulations {run,list,defaults,compare,bench}``.

Every experiment flag maps onto an :class:`~flwr_strategies.simulations.settings.ExperimentConfig`
field. A flag not given is *unset*: the method's paper defaults apply, then the project's.
``python -m simulations defaults METHOD`` (or ``run --method METHOD --help``, or
``list --method METHOD``) shows each value a run would use and where it comes from.

Errors in flags, method settings and data files are reported before the first round as one line
``error: --flag value: what is wrong`` with exit status 2. A run that finished reports its status
(``results.json`` ``status``, and on stderr when it is not ``ok``) in the exit status:

- 0: ``ok``;
- 1: ``failed``: no client update was aggregated in any round, or in two consecutive rounds (the
  run stops there, naming the cause and the fix), or the ``ray`` backend's run did not finish
  (Flower reported ``finished:failed``, or ``flwr run`` did not return in time);
- 3: ``degraded``: the run finished but a round aggregated no client update, a partition failed
  every round to the end, a round's aggregate was rejected as not finite, or the loss diverged.

A run holds its ``--out`` folder while it writes there: a folder another run is writing to, or one
that holds another run's results, is refused before training (exit status 2) unless
``--overwrite`` is given (which replaces the earlier results, never another run's ongoing ones).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

# Experiment flags: ExperimentConfig field -> help text. Flags not given stay unset (None).
_HELP: dict[str, str] = {
    "dataset": "digits, mnist, cifar10, cifar100, synthetic, or hf:NAME (any image-classification dataset through "
               "Flower Datasets: a Hugging Face id or a local parquet/arrow folder) (causal-lm methods: instructions, "
               "dolly, alpaca)",
    "data_dir": "folder with the dataset files (mnist, cifar, dolly/alpaca); hf: datasets' download cache",
    "num_clients": "number of clients (partitions)",
    "rounds": "federated rounds",
    "seed": "seed of sampling, model initialisation and client randomness",
    "data_seed": "seed of the train/test split and partition (default: --seed)",
    "partition": "iid, dirichlet, dirichlet-class, pathological, label-count, natural",
    "alpha": "Dirichlet concentration of the partition",
    "classes_per_client": "classes per client for pathological/label-count",
    "fraction_fit": "fraction of clients sampled per round, in (0, 1]",
    "lr": "client learning rate (round 1), or auto (DO-ADP family: derived from the step noise rule)",
    "lr_decay": "per-round learning-rate decay: round r uses lr * lr_decay**(r-1), in (0, 1]",
    "local_epochs": "local epochs per round (E); 'none' with --local-steps",
    "local_steps": "local minibatch steps per round (K; takes precedence over epochs); 'none' for epochs",
    "batch_size": "local minibatch size",
    "weight_decay": "L2 weight decay of local training, >= 0",
    "momentum": "local SGD momentum, in [0, 1)",
    "grad_clip": "gradient-norm clipping bound, > 0; 'none' turns a method's default clipping off",
    "model": "logreg, mlp, cnn_mnist, cnn_svhn, cnn_cifar, lenet_cifar, resnet18_gn (causal-lm: a checkpoint folder)",
    "synthetic_alpha": "Synthetic(alpha, beta): model heterogeneity alpha",
    "synthetic_beta": "Synthetic(alpha, beta): data heterogeneity beta",
    "backend": "inprocess (default) or ray",
    "device": "cpu (default) or cuda[:N]: where clients train",
    "client_cpus": "Ray CPUs per client (default 1)",
    "client_gpus": "Ray GPUs per client, fractional allowed (default 0)",
    "client_threads": "torch threads per client (default 1)",
    "client_seed": "simulation only: a secret per-node seed for the clients' private randomness (DO-ADP noise "
                   "and coins), kept in each node's context.state, never sent to the server; unset: OS entropy",
    "client_timeout": "seconds one client call may take in process, or 'auto' (default: 10x the slowest call so "
                      "far, at least 60 s, 600 s before the first); a client that overruns is a failed client",
}
_FIELDS = tuple(_HELP)


def _flag(name: str) -> str:
    from .settings import flag_name

    return flag_name(name)


def _setting_type(name: str):
    """argparse type of setting ``name``: :func:`~flwr_strategies.simulations.settings.typed_value`."""
    from .settings import FLOAT_SETTINGS, INT_SETTINGS, typed_value

    def parse(text: str) -> Any:
        return typed_value(name, text, _flag(name))

    # argparse names the type in its error message
    parse.__name__ = "int" if name in INT_SETTINGS else "float" if name in FLOAT_SETTINGS else "str"
    return parse


def _method_table(method: str | None) -> dict[str, tuple[str, str]]:
    """``{field: (value, source)}`` that ``method`` resolves to with no flags given."""
    from .settings import PROJECT_DEFAULTS, RESOLVED, ExperimentConfig, describe

    if method is None:
        return {name: (describe(PROJECT_DEFAULTS[name], name), "project") for name in RESOLVED}
    cfg = ExperimentConfig(method=method).resolve()
    return {name: (describe(cfg.provenance[name]["value"], name), cfg.provenance[name]["source"]) for name in RESOLVED}


def _add_experiment_flags(p: argparse.ArgumentParser, method: str | None = None) -> None:
    table = {}
    with contextlib.suppress(KeyError, ValueError):  # an unknown method is reported when the run starts
        table = _method_table(method)
    title = f"experiment (defaults for {method}: value, source)" if method and table else "experiment"
    g = p.add_argument_group(title)
    for name in _FIELDS:
        help_text = _HELP[name]
        if name in table:
            value, source = table[name]
            help_text += f" [{'default' if not method else method}: {value}, {source}]".replace("%", "%%")
        kwargs: dict[str, Any] = {"type": _setting_type(name), "help": help_text}
        if name == "backend":
            kwargs["choices"] = ("inprocess", "ray")
        g.add_argument(_flag(name), dest=name, **kwargs)
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="method hyperparameter (see: python -m simulations defaults METHOD)")
    g.add_argument("--fail", action="append", default=[], metavar="ROUND:PARTITION",
                   help="inject a client failure (ROUND may be *, every round)")
    g.add_argument("--download", action="store_true",
                   help="fetch mnist, cifar10 or cifar100 into --data-dir with torchvision first")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--overwrite", action="store_true",
                   help="replace the results of an earlier run in the output folder (without it such a folder is refused)")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {name: value for name in _FIELDS if (value := getattr(args, name, None)) is not None}
    if args.set:
        from .settings import parse_pairs

        out["params"] = parse_pairs(args.set, "params", "KEY=VALUE")
    if args.fail:
        out["fail"] = list(args.fail)
    if args.quiet:
        out["progress"] = False
    if args.download:
        out["download"] = True
    if args.overwrite:
        out["overwrite"] = True
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from .compare import merge_config
    from .experiment import ExperimentConfig
    from .results import final_text
    from .runner import run_experiment

    from flwr_strategies.adapters.recorder import NoProgressError

    conf = merge_config({"method": args.method}, _overrides(args))
    conf["out"] = args.out
    try:
        cfg = ExperimentConfig.from_dict(conf)
        _print_overrides(cfg.resolve())
        res = run_experiment(cfg, verbose=args.verbose)
    except NoProgressError as err:  # stopped: the cause and the fix, results.json already written
        if args.out:
            print(f"wrote {Path(args.out) / 'results.json'}")
        return _status_exit(args.method, f"failed: {err}")
    s = res["summary"]
    print(
        f"{res['method']}: {final_text(s)}, {s['rounds']} rounds, up {s['bytes_up_per_round']:.0f} B/round, "
        f"down {s['bytes_down_per_round']:.0f} B/round, failures {s['failures']}, {res['timing']['wall_s']:.1f} s"
    )
    if args.out:
        print(f"wrote {Path(args.out) / 'results.json'}")
    return _status_exit(res["method"], res["status"])


def overridden_training(cfg: Any) -> dict[str, Any]:
    """``{setting: the class's declared default}`` of each run setting (``--lr``...) that sets a field
    the strategy class declares (:meth:`~flwr_strategies.registry.MethodSpec.declared_training`) and
    that the method's ``train_defaults`` set to another value: its named overrides of the class."""
    from .settings import GIVEN_SOURCES, RESOLVED

    return {name: default for name, (default, _) in cfg.spec.declared_training().items()
            if default is not None and name in RESOLVED and (record := cfg.provenance.get(name))
            and record["value"] != default and record["source"] not in GIVEN_SOURCES}


def _print_overrides(cfg: Any) -> None:
    """Name, on stderr, each value the run takes from the method's named overrides rather than from
    its strategy class's declared default (the reason is in ``defaults METHOD`` and results.json)."""
    from .settings import GIVEN_SOURCES

    spec = cfg.spec
    declared = spec.declaration()
    sources = cfg.provenance.get("params", {})
    ran = [f"{k}={cfg.params[k]!r} (class default {declared[k][0]!r})" for k in spec.overrides
           if sources.get(k) not in GIVEN_SOURCES]
    ran += [f"{k}={getattr(cfg, k)!r} (class default {v!r})" for k, v in overridden_training(cfg).items()]
    if ran:
        print(f"{spec.name}: named overrides of the class defaults: {', '.join(ran)}", file=sys.stderr)


#: exit statuses of a finished run (see the module docstring)
EXIT_FAILED, EXIT_DEGRADED = 1, 3


def _status_exit(label: str, status: str) -> int:
    if status == "ok":
        return 0
    print(f"error: {label} {status}", file=sys.stderr)
    return EXIT_DEGRADED if status.startswith("degraded") else EXIT_FAILED


def print_defaults(method: str) -> None:
    """The settings ``method`` runs with when no flag is given, and where each comes from."""
    from flwr_strategies.registry import get_method

    from .settings import RESOLVED, ExperimentConfig, describe

    spec = get_method(method)
    cfg = ExperimentConfig(method=method).resolve()
    print(f"{spec.name}: {spec.summary}")
    print(f"paper: {spec.paper}")
    print("settings (a flag overrides its default; source: paper / official code / project, and where; "
          "* = the method's named override of its class's declared default):")
    training = overridden_training(cfg)
    for name in RESOLVED:
        rec = cfg.provenance[name]
        shown = ("* " if name in training else "") + describe(rec["value"], name)
        print(f"  {_flag(name):<22} {shown:<40} {rec['source']}")
    for name, default in training.items():
        print(f"  * {_flag(name)}: declared default {describe(default, name)} ({spec.strategy_name}), "
              f"overridden for {spec.name}")
    sources = cfg.provenance.get("params", {})
    if cfg.params:
        print(f"method hyperparameters (--set KEY=VALUE; the defaults {spec.strategy_name} and its configs declare, "
              "* = the method's named override of one):")
        declared = spec.declaration()
        for key, value in cfg.params.items():
            shown = ("* " if key in spec.overrides else "") + describe(value, key)
            print(f"  {key:<22} {shown:<40} {sources.get(key, 'unstated')}")
        for key in spec.overrides:
            print(f"  * {key}: declared default {describe(declared[key][0], key)}, overridden for {spec.name}")


def cmd_defaults(args: argparse.Namespace) -> int:
    print_defaults(args.method)
    step = resolved_step(args.method)
    if step:
        print(step)
    return 0


def resolved_step(method: str) -> str | None:
    """For a method whose default ``lr`` is ``auto``: the step its core derives on these defaults (the
    noise is calibrated first, so the data are loaded and the core is built; nothing trains)."""
    from flwr_strategies.setup import AUTO_LR

    from .settings import ExperimentConfig

    cfg = ExperimentConfig(method=method).validate()
    if cfg.lr != AUTO_LR:
        return None
    from .experiment import Experiment  # loads the data and torch: only for a step derived from them

    exp = Experiment(cfg)
    report = exp.build_core().privacy_report()
    if "beta0_rule" in report:
        return f"lr auto on these defaults: beta0 = {report['beta0']:.6g} ({report['beta0_rule']})"
    return f"lr auto on these defaults: step {report['alpha']:.6g} ({report['alpha_rule']})"


def cmd_list(args: argparse.Namespace) -> int:
    if getattr(args, "method", None):
        print_defaults(args.method)
        return 0
    from flwr_strategies.registry import list_methods

    from .datasets import DATASETS
    from .partition import PARTITIONS
    from .presets import list_presets

    print("methods (python -m simulations defaults METHOD shows a method's settings):",
          *(f"  {name:<16} {spec.summary}" for name, spec in list_methods().items()), sep="\n")
    print("datasets:", *(f"  {name}" for name in DATASETS), sep="\n")
    print("partitions:\n  " + ", ".join(PARTITIONS))
    print("presets:", *(f"  {name:<16} {preset.summary}" for name, preset in list_presets().items()), sep="\n")
    import flwr_strategies.simulations.bench as bench

    names = [m.name for m in pkgutil.iter_modules(bench.__path__)]
    print("benchmarks:\n  " + (", ".join(names) if names else "(none)"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from flwr_strategies.setup import SettingError

    from .compare import run_entries, run_preset
    from .presets import RunEntry, get_preset

    overrides = _overrides(args)
    if bool(args.preset) == bool(args.methods):
        raise SystemExit("compare needs exactly one of --preset P or --methods a,b,...")
    if args.preset:
        preset = get_preset(args.preset)
        out = Path(args.out or f"runs/{preset.name}")
        res = run_preset(preset, overrides, out)
    else:
        from flwr_strategies.registry import get_method

        names = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not names:
            raise SettingError("methods", args.methods, "a comma-separated list of at least one method name")
        for m in names:
            get_method(m)
        entries = [RunEntry(m, m) for m in names]
        out = Path(args.out or "runs/compare")
        res = run_entries(entries, {}, overrides, out, target=args.target, title="compare " + ", ".join(names))
    runs = [r for r in res if isinstance(r, dict)] if isinstance(res, list) else []
    bad = [r for r in runs if r.get("status", "ok") != "ok"]
    if bad:
        print(f"error: {len(bad)} of {len(runs)} runs did not end ok: " + "; ".join(f"{r['label']} {r['status']}" for r in bad),
              file=sys.stderr)
        return EXIT_DEGRADED if all(r["status"].startswith("degraded") for r in bad) else EXIT_FAILED
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


def _method_in(argv: list[str]) -> str | None:
    """The value of ``--method`` in ``argv`` (so ``run --method M --help`` can show M's defaults)."""
    for i, arg in enumerate(argv):
        if arg == "--method" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--method="):
            return arg.split("=", 1)[1]
    return None


def build_parser(method: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulations", description="flwr-strategies simulations")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run one method", description=(
        "Run one method. Flags not given take the method's paper defaults, shown in brackets with "
        "their source when --method comes before --help."))
    p_run.add_argument("--method", required=True)
    p_run.add_argument("--out", help="folder for results.json (created before training)")
    p_run.add_argument("--verbose", action="store_true", help="show Flower's log")
    _add_experiment_flags(p_run, method)
    p_list = sub.add_parser("list", help="list methods, datasets and presets (--method M: M's settings)")
    p_list.add_argument("--method", help="show this method's settings and where they come from")
    p_def = sub.add_parser("defaults", help="a method's settings and where each comes from (paper, official code...)")
    p_def.add_argument("method")
    p_cmp = sub.add_parser("compare", help="compare methods on one partition and seed")
    p_cmp.add_argument("--preset")
    p_cmp.add_argument("--methods", help="comma-separated method names")
    p_cmp.add_argument("--target", type=float, help="target accuracy for rounds-to-target (with --methods)")
    p_cmp.add_argument("--out", help="output folder (default runs/<preset>)")
    _add_experiment_flags(p_cmp)
    sub.add_parser("bench", help="run a benchmark: bench NAME [args]", add_help=False)
    return parser


def format_error(err: BaseException) -> str:
    """One line naming the flag (or file) and the value."""
    from flwr_strategies.setup import SettingError

    entry = getattr(err, "entry", None)
    if entry is not None:
        err.entry = None
        return f"compare entry '{entry}': " + format_error(err)
    if isinstance(err, SettingError):
        name = err.name
        if name.startswith("run config"):
            return f"{name} = {err.value!r}: must be {err.requirement}"
        source = getattr(err, "source", None)
        if source in (None, "user"):
            if name.startswith("params."):
                return f"--set {name[len('params.'):]}={err.value}: must be {err.requirement}"
            if name == "params":
                return f"--set {err.value}: must be {err.requirement}"
            return f"{_flag(name)} {err.value}: must be {err.requirement}"
        method = getattr(err, "method", "the method")
        return (f"{_flag(name)} defaults to {err.value!r} ({source} default of {method}), which is invalid: "
                f"must be {err.requirement}; set {_flag(name)} explicitly")
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    return str(err)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return cmd_bench(argv[1:])
    method = _method_in(argv) if argv and argv[0] == "run" else None
    args = build_parser(method).parse_args(argv)
    command = {"run": cmd_run, "list": cmd_list, "defaults": cmd_defaults, "compare": cmd_compare}[args.command]
    try:
        return command(args)
    except BrokenPipeError:  # output piped into a reader that stopped (| head)
        sys.stdout = open(os.devnull, "w")
        return 0
    except (KeyError, ValueError, OSError) as err:
        print(f"error: {format_error(err)}", file=sys.stderr)
        return 2
