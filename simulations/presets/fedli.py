"""FedLi presets: ``fedli`` (reduced scale, tuned baselines), ``fedli-paper`` (the paper's CIFAR-10
setting) and ``fedli-code`` (the official code's configuration beside the paper's).

``fedli``: FedLi-LS / FedLi-LU (untuned) vs tuned FedExP, FedAvg, FedAdam and SCAFFOLD (paper Sec. 7, App. C).

Paper setting: 100 clients, 10 per round, Dirichlet alpha = 0.1, one local epoch, batch 32, 500 rounds,
CIFAR/FEMNIST/Shakespeare. Reduced here to MNIST (``--data-dir``; digits otherwise) with a 784-200-200-10
MLP, 100 tuning-free rounds for the final table and 30-round tuning runs, so that the whole preset
finishes in about 10 minutes on 2 CPU cores.

Tuning (the paper's App. C protocol, reduced): each baseline's client lr from {1e-2, 1e-1, 1}; FedExP then its eps from
{1e-3, 10^-2.5, 1e-2, 10^-1.5, 1e-1} at its best lr; FedAdam its server lr from {1e-2, 1e-1, 1} at its
best client lr (found with server lr 0.1). The paper keeps the configuration with the highest training
accuracy; clients here report training loss, so a configuration is scored by the mean client-reported
training loss over the last 10 tuning rounds (lower is better; a diverged run scores +inf).
FedLi-LS and FedLi-LU run with their defaults (FedLi-LU's client lr is the paper's 0.01) and no tuning.
Every SGD client clips its gradient at max-norm 1.0, as in the paper (App. C) and ``fedli-paper``, whatever a
baseline's own default (FedAvg and FedAdam clip nothing by default); FedLi-LS's Armijo clients never clip.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from . import Preset, PresetContext, RunEntry, register_preset

BASE: dict[str, Any] = {
    "dataset": "mnist",
    "data_dir": None,
    "model": "mlp",
    "num_clients": 100,
    "fraction_fit": 0.1,
    "partition": "dirichlet",
    "alpha": 0.1,
    "local_epochs": 1,
    "batch_size": 32,
    "lr": 0.01,
    "grad_clip": 1.0,  # every SGD client, as in the paper (App. C); FedLi-LS's Armijo clients never clip
    "rounds": 100,
    "seed": 0,
    "backend": "inprocess",
}
TUNE_ROUNDS = 30
_NO_CLIP = {"grad_clip": None}
LR_GRID = (1e-2, 1e-1, 1.0)
EPS_GRID = (1e-3, 10**-2.5, 1e-2, 10**-1.5, 1e-1)
SERVER_LR_GRID = (1e-2, 1e-1, 1.0)

ENTRIES = [
    RunEntry("FedLi-LU", "fedli-lu"),
    RunEntry("FedLi-LS", "fedli-ls", _NO_CLIP),
    RunEntry("FedLi-LS (max)", "fedli-ls", {**_NO_CLIP, "params": {"step_size_sync": "max"}}),
    RunEntry("FedExP", "fedexp"),
    RunEntry("FedAvg", "fedavg"),
    RunEntry("FedAdam", "fedadam"),
    RunEntry("SCAFFOLD", "scaffold"),
]


def _score(result: dict[str, Any], last: int = 10) -> float:
    losses = [r.get("fit_train_loss") for r in result["rounds"] if r["round"] > 0][-last:]
    vals = [float(v) for v in losses if v is not None]
    acc = result["summary"]["final_accuracy"]
    if acc is None or not vals or not all(math.isfinite(v) for v in [*vals, acc]):
        return math.inf
    return sum(vals) / len(vals)


def _final_train_loss(result: dict[str, Any]) -> float | None:
    vals = [r.get("fit_train_loss") for r in result["rounds"] if r["round"] > 0]
    return float(vals[-1]) if vals and vals[-1] is not None else None


def run_fedli_preset(ctx: PresetContext) -> dict[str, Any]:
    """Tuning sweep for the baselines, then the final comparison; writes summary.md and summary.json."""
    from ..compare import merge_config, plot_accuracy, slug
    from ..experiment import ExperimentConfig
    from ..results import write_json, write_text
    from ..runner import run_experiment

    out_dir = Path(ctx.out_dir)
    base = merge_config(BASE, ctx.preset.base, ctx.overrides, {"progress": False})
    if base.get("dataset") == "mnist" and not base.get("data_dir"):
        base["dataset"] = "digits"  # no MNIST files given: fall back to the bundled digits
    tune_rounds = int(base.pop("tune_rounds", TUNE_ROUNDS))
    t_start = time.perf_counter()
    sweep: list[dict[str, Any]] = []

    def run(label: str, method: str, overrides: dict[str, Any], rounds: int, sub: str) -> dict[str, Any]:
        conf = merge_config(base, {"method": method, "rounds": rounds}, overrides)
        conf["out"] = str(out_dir / sub / slug(label))
        return run_experiment(ExperimentConfig.from_dict(conf), label=label)

    scores: dict[str, float] = {}

    def tune(name: str, method: str, grid: list[dict[str, Any]]) -> dict[str, Any]:
        best, best_score = grid[0], math.inf
        for ov in grid:
            key = f"{name} {json.dumps(ov, sort_keys=True)}"
            if key not in scores:  # else already run in an earlier stage of this method's sweep
                res = run(key, method, ov, tune_rounds, "tuning")
                score = scores[key] = _score(res)
                sweep.append({"method": name, "setting": ov, "score_train_loss": score,
                              "final_accuracy": res["summary"]["final_accuracy"], "wall_s": res["timing"]["wall_s"]})
                print(f"[tune] {name} {ov}: train loss {score:.4f}, acc {res['summary']['final_accuracy']:.4f}", flush=True)
            if scores[key] < best_score:
                best, best_score = ov, scores[key]
        return best

    chosen: dict[str, dict[str, Any]] = {}
    chosen["FedAvg"] = tune("FedAvg", "fedavg", [{"lr": lr} for lr in LR_GRID])
    chosen["SCAFFOLD"] = tune("SCAFFOLD", "scaffold", [{"lr": lr} for lr in LR_GRID])
    exp_lr = tune("FedExP", "fedexp", [{"lr": lr, "params": {"eps": 1e-3}} for lr in LR_GRID])
    chosen["FedExP"] = tune("FedExP", "fedexp", [{"lr": exp_lr["lr"], "params": {"eps": e}} for e in EPS_GRID[1:]] + [exp_lr])
    adam_lr = tune("FedAdam", "fedadam", [{"lr": lr, "params": {"eta": 0.1}} for lr in LR_GRID])
    chosen["FedAdam"] = tune(
        "FedAdam", "fedadam", [{"lr": adam_lr["lr"], "params": {"eta": e}} for e in SERVER_LR_GRID if e != 0.1] + [adam_lr]
    )
    tune_wall = time.perf_counter() - t_start

    results = []
    for entry in ctx.preset.entries:
        ov = merge_config(entry.overrides, chosen.get(entry.label, {}))
        res = run(entry.label, entry.method, ov, int(base["rounds"]), "final")
        res["chosen"] = chosen.get(entry.label, "untuned")
        results.append(res)
    total_wall = time.perf_counter() - t_start

    text = render_markdown(results, sweep, base, tune_rounds, tune_wall, total_wall)
    write_text(out_dir / "summary.md", text)
    plot_accuracy(results, out_dir / "accuracy.png", "preset fedli")
    summary = {
        "base": base, "tune_rounds": tune_rounds, "chosen": chosen, "sweep": sweep,
        "tuning_wall_s": tune_wall, "total_wall_s": total_wall,
        "runs": [{"label": r["label"], "method": r["method"], "params": r["params"], "chosen": r["chosen"],
                  "final_train_loss": _final_train_loss(r), **r["summary"], "wall_s": r["timing"]["wall_s"]} for r in results],
    }
    write_json(out_dir / "summary.json", summary)
    print(text)
    return summary


def render_markdown(results, sweep, base, tune_rounds, tune_wall, total_wall) -> str:
    lines = ["# preset fedli", ""]
    lines.append(
        f"{base['dataset']} ({base['model']}), {base['num_clients']} clients, fraction {base['fraction_fit']}, "
        f"partition {base['partition']} alpha {base['alpha']}, {base['local_epochs']} local epoch, batch {base['batch_size']}, "
        f"{base['rounds']} rounds, seed {base['seed']}, backend {base['backend']}. Tuning: {tune_rounds} rounds per setting "
        f"({tune_wall:.0f} s); everything: {total_wall:.0f} s."
    )
    lines += ["", "| method | tuned setting | final acc | best acc | final train loss | wall s |", "|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        tl = _final_train_loss(r)
        lines.append(
            f"| {r['label']} | {json.dumps(r['chosen']) if r['chosen'] != 'untuned' else 'untuned'} | "
            f"{100 * s['final_accuracy']:.2f} | {100 * s['best_accuracy']:.2f} | "
            f"{'n/a' if tl is None else f'{tl:.4f}'} | {r['timing']['wall_s']:.1f} |"
        )
    lines += ["", "Tuning sweep (score = mean client train loss over the last 10 tuning rounds; lower wins):", "",
              "| method | setting | score | final acc | wall s |", "|---|---|---|---|---|"]
    lines += [f"| {s['method']} | {json.dumps(s['setting'], sort_keys=True)} | {s['score_train_loss']:.4f} | "
              f"{100 * (s['final_accuracy'] or 0):.2f} | {s['wall_s']:.1f} |" for s in sweep]
    notes = results[0].get("data_notes", []) if results else []
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- fedli-paper
#: The paper's main table (Table 1, CIFAR-10 row): ResNet-18 with GroupNorm, 100 clients with a
#: Dirichlet(0.1) label split (FedML's per-class "hetero" procedure = our ``dirichlet-class``), one
#: local epoch of batch 32, client lr 0.01, 500 rounds; SGD clients clip at max-norm 1.0 (App. C:
#: "used", no threshold given), Armijo clients never clip. 10 of the 100 clients per round (Sec. 7 and App. C;
#: the successor FedSLS code takes the number as an argument: ``--fraction-fit 0.2`` for its 20).
PAPER_BASE: dict[str, Any] = {
    "dataset": "cifar10",
    "model": "resnet18_gn",
    "num_clients": 100,
    "fraction_fit": 0.1,
    "partition": "dirichlet-class",
    "alpha": 0.1,
    "local_epochs": 1,
    "batch_size": 32,
    "lr": 0.01,
    "grad_clip": 1.0,
    "rounds": 500,
    "seed": 0,
}
PAPER_ENTRIES = [
    RunEntry("FedLi-LU", "fedli-lu"),
    RunEntry("FedLi-LS", "fedli-ls", _NO_CLIP),
    RunEntry("FedAdam", "fedadam"),
    RunEntry("FedAvg", "fedavg"),
    RunEntry("FedProx", "fedprox", {"params": {"proximal_mu": 0.01}}),
    RunEntry("SCAFFOLD", "scaffold"),
    RunEntry("FedExP", "fedexp", {"params": {"eps": 1e-3}}),
]
#: Table 1 / Table 2, CIFAR-10 ResNet-18 row (500 rounds, mean of 5 seeds): accuracy %, train loss
PAPER_CIFAR10 = {
    "FedLi-LU": (86.02, 0.1053), "FedLi-LS": (75.50, 0.6103), "FedAdam": (81.42, 0.60832), "FedAvg": (78.47, 0.9425),
    "FedProx": (82.15, 0.6252), "SCAFFOLD": (71.11, 0.2914), "FedExP": (84.28, 0.6147),
}


def _select(entries: list[RunEntry], methods: Any) -> list[RunEntry]:
    """The entries named in ``methods`` (a comma list or a list) by label, by label without its
    bracketed suffix (``FedLi-LS`` for ``FedLi-LS (code)``) or by method; all of them when empty."""
    if not methods:
        return list(entries)
    wanted = [m.strip() for m in (methods.split(",") if isinstance(methods, str) else methods)]
    names = [(e.label, e.label.split(" (")[0], e.method) for e in entries]
    chosen = [e for e, n in zip(entries, names) if set(n) & set(wanted)]
    missing = [m for m in wanted if not any(m in n for n in names)]
    if missing:
        raise KeyError(f"unknown entries {missing}; this preset runs {[e.label for e in entries]}")
    return chosen


def _run_selected(ctx: PresetContext) -> list[dict[str, Any]]:
    """Run the preset's entries (``methods`` override: a subset, by label or method name)."""
    from ..compare import run_entries

    overrides = dict(ctx.overrides)
    entries = _select(ctx.preset.entries, overrides.pop("methods", None))
    return run_entries(entries, ctx.preset.base, overrides, Path(ctx.out_dir), title=f"preset {ctx.preset.name}")


def run_paper_preset(ctx: PresetContext) -> dict[str, Any]:
    """Run the paper's CIFAR-10 setting (``methods`` override: a subset of the entries, by label or
    method) and write summary.md with the paper's numbers beside ours."""
    results = _run_selected(ctx)
    lines = ["", "| method | final acc % | final train loss | paper acc % | paper train loss |", "|---|---|---|---|---|"]
    for r in results:
        acc, loss = PAPER_CIFAR10.get(r["label"], (None, None))
        tl = _final_train_loss(r)
        lines.append(f"| {r['label']} | {100 * r['summary']['final_accuracy']:.2f} | {'n/a' if tl is None else f'{tl:.4f}'} | "
                     f"{acc} | {loss} |")
    text = "\n".join(lines) + "\n"
    with open(Path(ctx.out_dir) / "summary.md", "a") as fh:
        fh.write(text)
    print(text)
    return {"runs": [{"label": r["label"], **r["summary"], "final_train_loss": _final_train_loss(r)} for r in results]}


# ----------------------------------------------------------------------------- fedli-code
#: The training settings the paper gives (Sec. 7, App. C), outside the default dataset's reduced setting.
PAPER_TRAIN = ("lr", "lr_decay", "local_epochs", "local_steps", "batch_size", "weight_decay", "momentum", "grad_clip",
               "fraction_fit")


def paper_train(method: str) -> dict[str, Any]:
    """The paper's training settings of ``method``: its defaults on the paper's dataset (not the default
    dataset's reduced setting), ``"none"`` for an optional setting that is off."""
    from flwr_strategies.registry import get_method

    from ..settings import ExperimentConfig

    cfg = ExperimentConfig(method=method, dataset="cifar10").resolve()
    keys = [k for k in PAPER_TRAIN if k in get_method(method).train_defaults or k in ("local_epochs", "local_steps")]
    return {k: ("none" if getattr(cfg, k) is None else getattr(cfg, k)) for k in keys}


def code_entries() -> list[RunEntry]:
    """Each method at the paper's training settings and with the official code's configuration (``variant=code``
    plus the code's training settings, :data:`flwr_strategies.fedli.registration.CODE_TRAIN`)."""
    from flwr_strategies.fedli.registration import CODE_TRAIN

    out = []
    for label, method in (("FedLi-LS", "fedli-ls"), ("FedLi-LU", "fedli-lu"), ("FedExP", "fedexp"), ("SCAFFOLD", "scaffold")):
        paper = paper_train(method)
        out.append(RunEntry(f"{label} (paper)", method, paper))
        out.append(RunEntry(f"{label} (code)", method, {**paper, **CODE_TRAIN[method], "params": {"variant": "code"}}))
    return out


register_preset(
    Preset(
        name="fedli-paper",
        summary="FedLi paper's Table 1 setting: CIFAR-10 ResNet-18-GN, 100 clients (10/round), Dir(0.1), 500 rounds "
                "(--data-dir, --device cuda)",
        base=PAPER_BASE,
        entries=PAPER_ENTRIES,
        custom=run_paper_preset,
    )
)


register_preset(
    Preset(
        name="fedli-code",
        summary="FedLi-LS/LU, FedExP, SCAFFOLD: the paper's training settings vs the official code's configuration "
                "(digits, 20 clients, 30 rounds)",
        base={"dataset": "digits", "num_clients": 20, "rounds": 30, "partition": "dirichlet", "alpha": 0.5, "seed": 0},
        entries=code_entries,
        custom=_run_selected,
    )
)


register_preset(
    Preset(
        name="fedli",
        summary="FedLi-LS/LU (untuned) vs tuned FedExP/FedAvg/FedAdam/SCAFFOLD, MNIST Dir(0.1), 100 clients (~10 min)",
        base={},
        entries=ENTRIES,
        custom=run_fedli_preset,
    )
)
