"""Regenerate the measured tables of README.md and docs/results that run in minutes on a CPU.

Each table sits in its file between ``<!-- regen:NAME -->`` and ``<!-- /regen:NAME -->``. What is
between the markers is exactly what ``python -m simulations.regen --print NAME`` prints: a line
naming the command, then the table. The runs are the project's own commands (``run --method M``,
``compare --preset P``), called in process with the same settings, so every number comes back from
the command printed beside it.

    python -m simulations.regen                   # rewrite every table in place
    python -m simulations.regen quickstart        # only these tables
    python -m simulations.regen --check           # exit 1 if a file differs from what its command prints
    python -m simulations.regen --print NAME      # print one table

``tests/test_regen.py`` checks the README's quickstart table and two results tables this way.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Table:
    """A generated table: the file it lives in and the function that measures and renders it."""

    path: str
    measure: Callable[[], str]
    about: str

    def render(self) -> str:
        """The table's text; the runs' own progress output goes to stderr."""
        with contextlib.redirect_stdout(sys.stderr):
            return self.measure()


_RUNS: dict[str, dict[str, Any]] = {}


def _run(method: str, **settings: Any) -> dict[str, Any]:
    """``python -m simulations run --method METHOD`` with ``settings`` (flag names with underscores), made
    once per process: tables that show the same run (doadp-defaults and doadp-readme) share it."""
    from flwr_strategies.simulations.runner import run_experiment
    from flwr_strategies.simulations.settings import ExperimentConfig

    key = repr((method, sorted(settings.items())))
    if key not in _RUNS:
        _RUNS[key] = run_experiment(ExperimentConfig(method=method, progress=False, **settings))
    return _RUNS[key]


def _flags(settings: dict[str, Any]) -> str:
    return "".join(f" --{k.replace('_', '-')} {v}" for k, v in settings.items())


def _command(name: str) -> str:
    return f"`python -m simulations.regen --print {name}`"


def _preset(name: str) -> tuple[Any, list[dict[str, Any]]]:
    """``python -m simulations compare --preset NAME`` (into a scratch folder): the preset and its runs."""
    from flwr_strategies.simulations.compare import run_preset
    from flwr_strategies.simulations.presets import get_preset

    preset = get_preset(name)
    with tempfile.TemporaryDirectory() as out:
        return preset, run_preset(preset, {"progress": False}, out)


# ----------------------------------------------------------------------------------- quickstart
def quickstart() -> str:
    """The README's table: the quickstart preset's four runs (final, best, rounds to 0.85)."""
    preset, results = _preset("quickstart")
    lines = [f"{_command('quickstart')} (the runs of `python -m simulations compare --preset quickstart`):", "",
             f"| quickstart (seed 0) | final acc | best acc | rounds to {preset.target_accuracy:.2f} |",
             "|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        hit = s.get("rounds_to_target")
        lines.append(f"| {r['label']} | {s['final_accuracy']:.4f} | {s['best_accuracy']:.4f} | "
                     f"{hit if hit is not None else '> ' + str(s['rounds'])} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- FedMUD, default dataset
FEDMUD_METHODS = ("fedhm", "fedlmt", "fedpara", "fedmud_mat", "fedmud_f", "fedmud_aad", "fedmud_bkd", "fedmud_bkd_f",
                  "fedmud_bkd_aad", "fedmud")
#: FedAvg with FedMUD's training settings on digits (the released FedAvg lr, 3 epochs of batch 64).
FEDAVG_AS_FEDMUD = {"lr": 0.03, "local_epochs": 3, "batch_size": 64}


def fedmud_defaults() -> str:
    """Every FedMUD method and baseline for 5 rounds on the default dataset with its own defaults."""
    rows = [("fedavg", {}), ("fedavg", dict(FEDAVG_AS_FEDMUD))] + [(m, {}) for m in FEDMUD_METHODS]
    lines = [f"{_command('fedmud-defaults')} (each row's command; accuracy of the global model, %):", "",
             "| command | clients per round | round 0 -> 5 |", "|---|---|---|"]
    for method, extra in rows:
        res = _run(method, rounds=5, **extra)
        acc = [r["accuracy"] for r in res["rounds"] if r.get("accuracy") is not None]
        lines.append(f"| `python -m simulations run --method {method} --rounds 5{_flags(extra)}` | "
                     f"{res['rounds'][1]['clients']} | {100 * acc[0]:.1f} -> {100 * acc[-1]:.1f} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------- FedLi-LU's step in the quickstart setting
#: The quickstart's setting for FedLi-LU: digits, 10 clients all training, Dirichlet 0.5, client lr 0.05.
FEDLI_QUICKSTART = {"num_clients": 10, "fraction_fit": 1.0, "partition": "dirichlet", "alpha": 0.5, "lr": 0.05,
                    "rounds": 20}


def fedli_lu_ratio() -> str:
    """FedLi-LU's DFW step (gamma) and its ratio f / (eta ||Delta||^2) in the quickstart setting, with the
    method's default clipping (max-norm 1.0) and without."""
    lines = [f"{_command('fedli-lu-ratio')}:", "",
             "| command | rounds | gamma | f / (eta \\|\\|Delta\\|\\|^2) min / max |", "|---|---|---|---|"]
    for extra in ({}, {"grad_clip": "none"}):
        settings = {**FEDLI_QUICKSTART, **extra}
        res = _run("fedli-lu", **settings)
        rounds = [r for r in res["rounds"] if r["round"] > 0]
        gammas = sorted({r["fit_gamma"] for r in rounds})
        ratio = [r["fit_polyak_ratio"] for r in rounds]
        gamma = f"{gammas[0]:g} in all {len(rounds)}" if len(gammas) == 1 else f"{min(gammas):g} to {max(gammas):g}"
        lines.append(f"| `python -m simulations run --method fedli-lu{_flags(settings)}` | {len(rounds)} | {gamma} | "
                     f"{min(ratio):.1f} / {max(ratio):.1f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- fedli-code
def fedli_code() -> str:
    """The fedli-code preset: final accuracy of each method with the paper's training settings and with the
    official code's configuration."""
    _, results = _preset("fedli-code")
    acc = {r["label"]: 100 * r["summary"]["final_accuracy"] for r in results}
    lines = [f"{_command('fedli-code')} (the runs of `python -m simulations compare --preset fedli-code`):", "",
             "| method | paper configuration: final acc % | code configuration: final acc % |", "|---|---|---|"]
    lines += [f"| {method} | {acc[method + ' (paper)']:.2f} | {acc[method + ' (code)']:.2f} |"
              for method in dict.fromkeys(label.rsplit(" (", 1)[0] for label in acc)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ DO-ADP and its baselines, defaults
DOADP_METHODS = ("doadp", "dmsgd", "dpdo", "dp-dda", "cpgt")
#: The simulated nodes' secret seeds of the table (``--client-seed``): the noise of a plain run comes from OS
#: entropy, so the table shows seeded runs, four for the methods that learn near the rule's edge.
DOADP_CLIENT_SEEDS = {"doadp": (0, 1, 2, 3), "dp-dda": (0, 1, 2, 3), "dmsgd": (0, 1), "dpdo": (0, 1), "cpgt": (0, 1)}


def learned(rounds: list[dict[str, Any]], min_gain: float = 0.05) -> tuple[bool, str]:
    """Whether a run learned: accuracy up at least ``min_gain`` over round 0 and the final loss below the
    initial loss (the rule the DO-ADP family's default runs are held to), with the numbers."""
    ev = [r for r in rounds if r.get("accuracy") is not None and r.get("loss") is not None]
    first, last = ev[0], ev[-1]
    ok = last["accuracy"] >= first["accuracy"] + min_gain and last["loss"] < first["loss"]
    return ok, (f"{first['accuracy']:.3f} -> {last['accuracy']:.3f}", f"{first['loss']:.3f} -> {last['loss']:.3f}")


def doadp_defaults() -> str:
    """DO-ADP, D-mSGD and the baselines with nothing but their name (and a client seed), on their defaults;
    then DPDO and CPGT at DO-ADP's epsilon 4 (the paper's equal-epsilon comparison), and DO-ADP and DP-DDA at
    the CNN row's epsilon 1."""
    lines = [f"{_command('doadp-defaults')} (each row's command; digits, 20 agents, 20 rounds, the step from the "
             "noise rule; learned = accuracy up >= 0.05 and final loss below the initial):", "",
             "| command | epsilon | step (round 1) | noise norm per step | accuracy round 0 -> 20 | loss round 0 -> 20 | "
             "learned |", "|---|---|---|---|---|---|---|"]
    runs = [(m, {}) for m in DOADP_METHODS] + [("dpdo", {"epsilon": 4.0}), ("cpgt", {"epsilon": 4.0}),
                                                ("doadp", {"epsilon": 1.0}), ("dp-dda", {"epsilon": 1.0})]
    for method, params in runs:
        for seed in DOADP_CLIENT_SEEDS[method]:
            res = _run(method, client_seed=seed, params=dict(params))
            first = res["rounds"][1]
            ok, (acc, loss) = learned(res["rounds"])
            eps = res["params"].get("epsilon")
            step = first.get("fit_alpha", res["config"]["lr"])
            step = f"beta0 {first['fit_beta0']:.4g}" if "fit_beta0" in first else f"{step:.4g}"
            noise = first.get("fit_step_noise_norm")
            sets = "".join(f" --set {k}={v:g}" for k, v in params.items())
            lines.append(f"| `python -m simulations run --method {method} --client-seed {seed}{sets}` | "
                         f"{'-' if eps is None else f'{eps:g}'} | {step} | {'-' if noise is None else f'{noise:.3g}'} | "
                         f"{acc} | {loss} | {'yes' if ok else 'no'} |")
    return "\n".join(lines) + "\n"


def doadp_readme() -> str:
    """The README's summary of :func:`doadp_defaults`: each of the DO-ADP family with nothing but its name, at
    client seed 0."""
    lines = [f"{_command('doadp-readme')} (each row is `python -m simulations run --method M --client-seed 0`: "
             "digits, 20 agents, 20 rounds; every seed and the equal-epsilon rows are on the DO-ADP page):", "",
             "| `--method` | epsilon (its default) | accuracy round 0 -> 20 | loss round 0 -> 20 |",
             "|---|---|---|---|"]
    for method in DOADP_METHODS:
        res = _run(method, client_seed=0)
        _, (acc, loss) = learned(res["rounds"])
        eps = res["params"].get("epsilon")
        lines.append(f"| `{method}` | {'- (no noise)' if eps is None else f'{eps:g}'} | {acc} | {loss} |")
    return "\n".join(lines) + "\n"


TABLES: dict[str, Table] = {
    "quickstart": Table("README.md", quickstart, "the quickstart preset (about 30 s)"),
    "fedmud-defaults": Table("docs/results/fedmud.md", fedmud_defaults, "12 runs of 5 rounds on digits (about 40 s)"),
    "fedli-lu-ratio": Table("docs/results/fedli.md", fedli_lu_ratio, "2 runs of 20 rounds on digits (about 10 s)"),
    "fedli-code": Table("docs/results/fedli.md", fedli_code, "the fedli-code preset (about 90 s)"),
    "doadp-defaults": Table("docs/methods/doadp.md", doadp_defaults, "26 runs of 20 rounds on digits (about 30 s)"),
    "doadp-readme": Table("README.md", doadp_readme, "5 runs of 20 rounds on digits (about 10 s)"),
}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- regen:{name} -->\n", f"<!-- /regen:{name} -->"


def block(text: str, name: str) -> str:
    """The text between ``name``'s markers in ``text`` (a missing marker raises naming it)."""
    start, end = markers(name)
    if start not in text or end not in text:
        raise KeyError(f"table '{name}' has no '{start.strip()}' ... '{end}' markers")
    return text.split(start, 1)[1].split(end, 1)[0]


def replace(text: str, name: str, table: str) -> str:
    start, end = markers(name)
    head, rest = text.split(start, 1)
    return head + start + table + end + rest.split(end, 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.regen", description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="*", help=f"tables to regenerate (default: all): {', '.join(TABLES)}")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from what its command prints")
    parser.add_argument("--print", dest="show", metavar="NAME", help="print one table and change nothing")
    args = parser.parse_args(argv)
    if args.show:
        if args.show not in TABLES:
            parser.error(f"unknown table '{args.show}'; tables: {', '.join(TABLES)}")
        print(TABLES[args.show].render(), end="")
        return 0
    unknown = [t for t in args.tables if t not in TABLES]
    if unknown:
        parser.error(f"unknown table(s) {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    stale = []
    for name in args.tables or list(TABLES):
        table = TABLES[name]
        path = ROOT / table.path
        text = path.read_text()
        block(text, name)
        print(f"{name}: {table.about} ...", file=sys.stderr, flush=True)
        fresh = table.render()
        if block(text, name) == fresh:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(replace(text, name, fresh))
            print(f"{name}: rewrote {table.path}", file=sys.stderr)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (python -m simulations.regen {' '.join(stale)})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
